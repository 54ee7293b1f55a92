//! The person's confirmation for what an agent should not do on its own: take over a
//! persistent endpoint, stop a workflow that serves one, delete an endpoint.
//!
//! The server asks and enforces; the agent only carries the question. In order:
//! - a call answering our earlier question (2026-07-28's input-required round trip: the
//!   client retries with `inputResponses` and the `requestState` we gave it);
//! - a call with a `confirmation_token` we handed out earlier (clients that cannot ask);
//! - a client on 2026-07-28 or later that declared elicitation gets an `InputRequiredResult`;
//! - a client on an older revision that declared elicitation gets `elicitation/create` sent
//!   mid-call, and the call waits for the answer;
//! - any other client is refused, with a short-lived token for the agent to call again with
//!   once the person agreed.
//!
//! Tokens and request states are random, kept only in this process, single use, and bound to
//! the user and to a digest of exactly what was asked (for a takeover: the file, the name, and
//! which workflow serves each endpoint now), so they confirm nothing else. Declined, cancelled,
//! unanswered or expired means nothing happens.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, ElicitRequest,
    ElicitRequestParams, ElicitResult, ElicitationAction, ElicitationSchema, InputRequest,
    InputRequests, InputRequiredResult, ProtocolVersion,
};
use rmcp::service::{ElicitationMode, RequestContext};
use rmcp::RoleServer;
use serde_json::json;
use sha2::{Digest, Sha256};
use uuid::Uuid;

/// How long a confirmation token, a pending question, or a person's wait may last.
const TTL: Duration = Duration::from_secs(300);

/// The confirmation channels recorded on takeovers and in events.
pub const VIA_ELICITATION: &str = "mcp-elicitation";
pub const VIA_INPUT_REQUIRED: &str = "mcp-input-required";
pub const VIA_TOKEN: &str = "mcp-token";

/// The key of `inputRequests` that carries our question.
const KEY: &str = "confirm";

/// What is to be confirmed.
pub struct Action {
    /// Binds tokens and request states to exactly this: a digest of the action's facts.
    key: String,
    /// The question for the person, naming what would change.
    pub question: String,
    /// What did not happen when they say no: "started", "stopped", "deleted".
    undone: &'static str,
}

impl Action {
    pub fn new(facts: &[&str], question: String, undone: &'static str) -> Action {
        let mut h = Sha256::new();
        for f in facts {
            h.update(f.as_bytes());
            h.update([0]);
        }
        Action {
            key: hex::encode(h.finalize()),
            question,
            undone,
        }
    }
}

/// The person said yes.
pub struct Confirmed {
    /// The channel, recorded with the action.
    pub via: &'static str,
    /// The answer came within this call, after a wait in which the cluster may have changed.
    pub waited: bool,
}

struct Pending {
    user: Uuid,
    key: String,
    expires: Instant,
}

#[derive(Default)]
pub struct Confirmations {
    tokens: Mutex<HashMap<String, Pending>>,
    states: Mutex<HashMap<String, Pending>>,
}

fn random() -> String {
    let mut b = [0u8; 16];
    getrandom::fill(&mut b).expect("the OS random source is available");
    hex::encode(b)
}

/// Takes a single-use entry: valid only for this user and this action, and in time.
fn take(map: &Mutex<HashMap<String, Pending>>, id: &str, user: Uuid, action: &Action) -> bool {
    let mut map = map.lock().expect("not poisoned");
    let now = Instant::now();
    map.retain(|_, p| p.expires > now);
    match map.remove(id) {
        Some(p) if p.user == user && p.key == action.key => true,
        Some(p) => {
            // Another user's or another action's: it stays theirs.
            map.insert(id.to_string(), p);
            false
        }
        None => false,
    }
}

fn put(map: &Mutex<HashMap<String, Pending>>, user: Uuid, action: &Action) -> String {
    let id = random();
    let mut map = map.lock().expect("not poisoned");
    let now = Instant::now();
    map.retain(|_, p| p.expires > now);
    map.insert(
        id.clone(),
        Pending {
            user,
            key: action.key.clone(),
            expires: now + TTL,
        },
    );
    id
}

fn elicitation(action: &Action) -> ElicitRequestParams {
    let schema = ElicitationSchema::builder()
        .required_bool(KEY)
        .description("Set confirm to true to go ahead; anything else changes nothing.")
        .build()
        .expect("a one-field schema is valid");
    ElicitRequestParams::FormElicitationParams {
        meta: None,
        message: action.question.clone(),
        requested_schema: schema,
    }
}

/// What the client gets when the answer is no (or no valid answer): nothing happened, and why.
fn declined(action: &Action, why: &str) -> CallToolResponse {
    CallToolResult::error(vec![ContentBlock::text(format!(
        "Nothing was {}: {why}.",
        action.undone
    ))])
    .into()
}

/// Yes only for an accepted answer whose `confirm` is true.
fn said_yes(answer: &ElicitResult) -> bool {
    answer.action == ElicitationAction::Accept
        && answer
            .content
            .as_ref()
            .and_then(|c| c.get(KEY))
            .and_then(|v| v.as_bool())
            == Some(true)
}

impl Confirmations {
    /// The person's yes, or what to return to the client instead: the question, or why nothing
    /// was done.
    pub async fn confirm(
        &self,
        ctx: &RequestContext<RoleServer>,
        request: &CallToolRequestParams,
        user: Uuid,
        action: &Action,
        token: Option<&str>,
    ) -> Result<Confirmed, CallToolResponse> {
        if let Some(state) = &request.request_state {
            if !take(&self.states, state, user, action) {
                return Err(declined(
                    action,
                    "the question this answers has expired or was about something else",
                ));
            }
            let answer = request
                .input_responses
                .as_ref()
                .and_then(|r| r.get(KEY))
                .and_then(|v| serde_json::from_value::<ElicitResult>(v.clone()).ok());
            return match answer {
                Some(a) if said_yes(&a) => Ok(Confirmed {
                    via: VIA_INPUT_REQUIRED,
                    waited: false,
                }),
                Some(_) => Err(declined(action, "the person declined")),
                None => Err(declined(
                    action,
                    "the client sent no answer to the question",
                )),
            };
        }
        if let Some(t) = token {
            if take(&self.tokens, t, user, action) {
                return Ok(Confirmed {
                    via: VIA_TOKEN,
                    waited: false,
                });
            }
            return Err(self.refuse(
                user,
                action,
                "The confirmation_token given is unknown, expired, used, or for something else. ",
            ));
        }
        let modern = ctx
            .protocol_version()
            .is_some_and(|v| v >= ProtocolVersion::V_2026_07_28);
        if modern {
            let can_ask = ctx
                .client_capabilities()
                .and_then(|c| c.elicitation)
                .is_some_and(|e| e.form.is_some() || e.url.is_none());
            if can_ask {
                let state = put(&self.states, user, action);
                let mut asks = InputRequests::new();
                asks.insert(
                    KEY.into(),
                    InputRequest::Elicitation(ElicitRequest::new(elicitation(action))),
                );
                return Err(InputRequiredResult::new(Some(asks), Some(state)).into());
            }
        } else if ctx
            .peer
            .supported_elicitation_modes()
            .contains(&ElicitationMode::Form)
        {
            let asked = ctx
                .peer
                .create_elicitation_with_timeout(elicitation(action), Some(TTL))
                .await;
            return match asked {
                Ok(a) if said_yes(&a) => Ok(Confirmed {
                    via: VIA_ELICITATION,
                    waited: true,
                }),
                Ok(_) => Err(declined(action, "the person declined")),
                Err(e) => Err(declined(
                    action,
                    &format!("no answer from the person ({e})"),
                )),
            };
        }
        Err(self.refuse(user, action, ""))
    }

    /// For clients that cannot ask: nothing happens, and a token lets the agent call again
    /// once it has asked the person itself.
    fn refuse(&self, user: Uuid, action: &Action, why: &str) -> CallToolResponse {
        let token = put(&self.tokens, user, action);
        let text = format!(
            "{why}Nothing was done: this needs the person's confirmation, and this client cannot \
             ask them. Ask them: \"{}\" Only if they agree, call this tool again with the same \
             arguments and confirmation_token \"{token}\" (valid for {} minutes, once).",
            action.question,
            TTL.as_secs() / 60
        );
        let mut result = CallToolResult::error(vec![ContentBlock::text(text)]);
        result.structured_content = Some(json!({
            "confirmation_required": true,
            "question": action.question,
            "confirmation_token": token,
            "expires_in_seconds": TTL.as_secs(),
        }));
        result.into()
    }
}

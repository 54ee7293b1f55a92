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
//! Tokens and request states are random, single use, and bound to the user and to a digest of
//! exactly what was asked (for a takeover: the file, the name, and which workflow serves each
//! endpoint now), so they confirm nothing else. They are kept in the store by their hash (the
//! call that answers may reach another server replica), never as themselves. Declined,
//! cancelled, unanswered or expired means nothing happens.

use std::sync::Arc;
use std::time::Duration;

use gantry_store::{ConfirmationKind, NewConfirmation, Store};

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

use crate::caller::hash_token;

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

/// The single-use confirmations, in the store.
pub struct Confirmations {
    store: Arc<dyn Store>,
}

fn random() -> String {
    let mut b = [0u8; 16];
    getrandom::fill(&mut b).expect("the OS random source is available");
    hex::encode(b)
}

/// A store failure as the client sees it: nothing happened.
fn unavailable(action: &Action, e: gantry_store::StoreError) -> CallToolResponse {
    tracing::warn!("mcp confirmation: {e}");
    declined(
        action,
        "the server could not keep or check the confirmation",
    )
}

impl Confirmations {
    pub fn new(store: Arc<dyn Store>) -> Confirmations {
        Confirmations { store }
    }

    /// Takes a single-use entry: valid only for this user and this action, and in time.
    async fn take(
        &self,
        kind: ConfirmationKind,
        id: &str,
        user: Uuid,
        action: &Action,
    ) -> Result<bool, CallToolResponse> {
        self.store
            .take_confirmation(
                kind,
                &hash_token(id),
                user,
                &action.key,
                crate::clock::now_ms(),
            )
            .await
            .map_err(|e| unavailable(action, e))
    }

    async fn put(
        &self,
        kind: ConfirmationKind,
        user: Uuid,
        action: &Action,
    ) -> Result<String, CallToolResponse> {
        let id = random();
        let now = crate::clock::now_ms();
        let c = NewConfirmation {
            kind,
            id_hash: hash_token(&id),
            user_id: user,
            action: action.key.clone(),
            expires_at: now + TTL.as_millis() as i64,
        };
        self.store
            .put_confirmation(&c, now)
            .await
            .map_err(|e| unavailable(action, e))?;
        Ok(id)
    }
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
            if !self
                .take(ConfirmationKind::Question, state, user, action)
                .await?
            {
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
            if self.take(ConfirmationKind::Token, t, user, action).await? {
                return Ok(Confirmed {
                    via: VIA_TOKEN,
                    waited: false,
                });
            }
            return Err(self
                .refuse(
                    user,
                    action,
                    "The confirmation_token given is unknown, expired, used, or for something else. ",
                )
                .await);
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
                let state = self.put(ConfirmationKind::Question, user, action).await?;
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
        Err(self.refuse(user, action, "").await)
    }

    /// For clients that cannot ask: nothing happens, and a token lets the agent call again
    /// once it has asked the person itself.
    async fn refuse(&self, user: Uuid, action: &Action, why: &str) -> CallToolResponse {
        let token = match self.put(ConfirmationKind::Token, user, action).await {
            Ok(t) => t,
            Err(e) => return e,
        };
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

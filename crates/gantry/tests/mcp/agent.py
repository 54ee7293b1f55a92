"""An AI agent's side of Gantry's MCP server, driven by crates/gantry/tests/mcp.rs.

It uses the official Python MCP SDK (PyPI `mcp`) as a real client would: over Streamable HTTP
(to the server's /mcp) or over stdio (`gantry mcp`), on the handshake-era protocol (`legacy`,
where the server asks the person with `elicitation/create`) or on 2026-07-28 (where the server
answers with an input-required result and the client retries), and either as a client that can
ask its person (answering accept or decline) or as one that cannot.

Each scenario asserts what the client itself can see and prints one JSON object for the Rust
test, which checks the cluster's side through the CLI. A failed assertion exits non-zero.
"""

import argparse
import asyncio
import json
import os
import sys
import time

import httpx2
import mcp_types as types
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client

WRITE_TOOLS = {"start_workflow", "stop_workflow", "create_endpoint", "delete_endpoint"}
READ_TOOLS = {
    "list_workflows",
    "get_workflow",
    "workflow_status",
    "workflow_events",
    "job_logs",
    "validate_workflow",
    "list_nodes",
    "list_endpoints",
    "get_endpoint",
    "endpoint_history",
}
DESTRUCTIVE = {"start_workflow", "stop_workflow", "delete_endpoint"}


def check(cond, what):
    if not cond:
        raise AssertionError(what)


class Person:
    """Stands for the person at the client: answers every confirmation the same way."""

    def __init__(self, answer):
        self.answer = answer
        self.asked = []

    async def __call__(self, context, params):
        self.asked.append(params.message)
        if self.answer == "accept":
            return types.ElicitResult(action="accept", content={"confirm": True})
        return types.ElicitResult(action=self.answer)


def client(args, person=None):
    callback = person if person is not None else None
    if args.transport == "http":
        http = httpx2.AsyncClient(
            headers={"Authorization": f"Bearer {args.token}"},
            timeout=httpx2.Timeout(120.0),
        )
        transport = streamable_http_client(f"{args.url}/mcp", http_client=http)
    else:
        env = {"GANTRY_URL": args.url, "GANTRY_TOKEN": args.token}
        for k in ("PATH", "HOME"):
            if k in os.environ:
                env[k] = os.environ[k]
        transport = StdioServerParameters(command=args.gantry, args=["mcp"], env=env)
    return Client(transport, mode=args.mode, elicitation_callback=callback)


def text_of(result):
    return "\n".join(c.text for c in result.content if getattr(c, "text", None))


def data(result, what):
    check(not result.is_error, f"{what} failed: {text_of(result)}")
    check(isinstance(result.structured_content, dict), f"{what}: no structured content")
    return result.structured_content


async def tools(args):
    async with client(args) as c:
        listed = (await c.list_tools()).tools
        names = {t.name for t in listed}
        check(names == READ_TOOLS | WRITE_TOOLS, f"tools listed: {sorted(names)}")
        for t in listed:
            check(t.description and len(t.description) > 30, f"{t.name} has a description")
            check(t.input_schema.get("type") == "object", f"{t.name} has an object schema")
            a = t.annotations
            check(a is not None, f"{t.name} is annotated")
            check(a.read_only_hint == (t.name in READ_TOOLS), f"{t.name} readOnlyHint {a}")
            if t.name in WRITE_TOOLS:
                check(a.destructive_hint == (t.name in DESTRUCTIVE), f"{t.name} destructiveHint {a}")
            check(a.open_world_hint is False, f"{t.name} openWorldHint {a}")
        idem = {t.name: t.annotations.idempotent_hint for t in listed}
        check(idem["start_workflow"] is False and idem["stop_workflow"] is True, f"idempotent {idem}")
        check(all(idem[n] for n in READ_TOOLS), f"reads are idempotent {idem}")
        start = next(t for t in listed if t.name == "start_workflow")
        props = start.input_schema["properties"]
        check({"spec", "confirmation_token", "await_approval"} <= set(props), f"start schema {props}")
        check(start.input_schema.get("required") == ["spec"], f"start requires {start.input_schema}")
        resources = (await c.list_resources()).resources
        uris = {str(r.uri) for r in resources}
        check("gantry://docs/workflow-file" in uris, f"resources {uris}")
        ref = await c.read_resource("gantry://docs/workflow-file")
        check("version: v4" in ref.contents[0].text, "the reference shows a workflow file")
        example = await c.read_resource("gantry://examples/pipeline.yaml")
        valid = data(await c.call_tool("validate_workflow", {"spec": example.contents[0].text}), "validate")
        check(valid["valid"] is True, f"the example validates: {valid}")
        print(json.dumps({"protocol": c.protocol_version, "tools": sorted(names), "resources": sorted(uris)}))


async def run(args):
    """An agent writes a file, checks it, starts it, follows it to the end and reads its logs."""
    spec = open(args.spec).read()
    async with client(args) as c:
        bad = data(await c.call_tool("validate_workflow", {"spec": spec.replace("image:", "imagee:", 1)}), "validate")
        check(bad["valid"] is False, "a misspelt key is invalid")
        d = bad["diagnostics"]
        check(any("did you mean `image`" in x["message"] and x["line"] > 1 and x["column"] > 1 for x in d), f"positions: {d}")
        good = data(await c.call_tool("validate_workflow", {"spec": spec}), "validate")
        check(good["valid"] is True and good["unsupported"] == [], f"valid: {good}")
        started = data(await c.call_tool("start_workflow", {"spec": spec, "name": "mcp-agent"}), "start")
        wid = started["id"]
        deadline = time.time() + 180
        while True:
            status = data(await c.call_tool("workflow_status", {"id": wid}), "status")
            if status["done"]:
                break
            check(time.time() < deadline, f"workflow did not end: {status}")
            await asyncio.sleep(0.5)
        check(status["status"] == "FINISHED", f"workflow ended {status}")
        detail = data(await c.call_tool("get_workflow", {"id": wid[:8]}), "get")
        check(detail["name"] == "mcp-agent" and detail["tasks"], f"detail {detail}")
        # Paged in small pieces: every byte exactly once, in order.
        logs, offset, pages = "", 0, 0
        while True:
            page = data(await c.call_tool("job_logs", {"workflow": wid, "job": args.job, "offset": offset, "max_bytes": 7}), "logs")
            check(page["offset"] == offset, f"page {page}")
            logs += page["text"]
            offset = page["next_offset"]
            pages += 1
            if not page["more"]:
                break
        check(pages > 1, "the output took more than one page")
        events = data(await c.call_tool("workflow_events", {"id": wid, "limit": 2}), "events")
        check(len(events["events"]) == 2 and events["more"], f"events page {events}")
        rest = data(await c.call_tool("workflow_events", {"id": wid, "after": events["next_after"]}), "events")
        check(rest["events"][0]["seq"] > events["events"][-1]["seq"], "the next page follows")
        listed = data(await c.call_tool("list_workflows", {"status": "FINISHED"}), "list")
        check(any(w["id"] == wid for w in listed["workflows"]), "the workflow is listed")
        print(json.dumps({"protocol": c.protocol_version, "id": wid, "logs": logs, "pages": pages}))


async def isolation(args):
    """Another user's agent sees nothing of it."""
    async with client(args) as c:
        for tool, params in [
            ("get_workflow", {"id": args.workflow}),
            ("workflow_status", {"id": args.workflow}),
            ("job_logs", {"workflow": args.workflow, "job": args.job}),
            ("stop_workflow", {"id": args.workflow}),
        ]:
            r = await c.call_tool(tool, params)
            check(r.is_error and "no workflow" in text_of(r), f"{tool} as another user: {text_of(r)}")
        listed = data(await c.call_tool("list_workflows", {}), "list")
        check(all(w["id"] != args.workflow for w in listed["workflows"]), "not listed")
        print(json.dumps({"ok": True}))


async def confirmable(args, tool, params, refused_word):
    """Calls a tool that needs the person's confirmation, as the client at hand would."""
    person = Person(args.elicit) if args.elicit != "none" else None
    async with client(args, person) as c:
        out = {"protocol": c.protocol_version}
        if args.await_approval:
            params = dict(params, await_approval=True)
        r = await c.call_tool(tool, params)
        out["asked"] = person.asked if person else []
        if args.unasked:
            check(person is None or not person.asked, f"nobody was asked: {person.asked}")
            print(json.dumps(dict(out, result=data(r, tool))))
            return
        if person is not None and not args.await_approval:
            check(len(person.asked) == 1, f"the person was asked once: {person.asked}")
        if args.elicit == "none" and not args.await_approval:
            check(r.is_error, f"refused without confirmation: {text_of(r)}")
            s = r.structured_content
            check(s["confirmation_required"] is True and s["confirmation_token"], f"a token: {s}")
            check("Nothing was done" in text_of(r) and s["confirmation_token"] in text_of(r), text_of(r))
            # A made-up token confirms nothing.
            wrong = await c.call_tool(tool, dict(params, confirmation_token="0" * 32))
            check(wrong.is_error and wrong.structured_content["confirmation_token"], text_of(wrong))
            if not args.with_token:
                print(json.dumps(dict(out, refused=text_of(r))))
                return
            if args.confirm_url:
                # Handed out by one server replica, taken through another.
                there = argparse.Namespace(**dict(vars(args), url=args.confirm_url))
                async with client(there) as c2:
                    r = await c2.call_tool(tool, dict(params, confirmation_token=s["confirmation_token"]))
                    again = await c2.call_tool(tool, dict(params, confirmation_token=s["confirmation_token"]))
            else:
                r = await c.call_tool(tool, dict(params, confirmation_token=s["confirmation_token"]))
                again = await c.call_tool(tool, dict(params, confirmation_token=s["confirmation_token"]))
            check(again.is_error, "a token is used once")
        if args.elicit == "decline":
            check(r.is_error and refused_word in text_of(r), f"declined: {text_of(r)}")
            print(json.dumps(dict(out, refused=text_of(r))))
            return
        print(json.dumps(dict(out, result=data(r, tool))))


async def takeover(args):
    spec = open(args.spec).read()
    await confirmable(args, "start_workflow", {"spec": spec}, "Nothing was started")


async def stop(args):
    await confirmable(args, "stop_workflow", {"id": args.workflow}, "Nothing was stopped")


async def delete_endpoint(args):
    await confirmable(args, "delete_endpoint", {"name": args.endpoint}, "Nothing was deleted")


async def create_endpoint(args):
    async with client(args) as c:
        e = data(await c.call_tool("create_endpoint", {"name": args.endpoint, "scope": "public"}), "create")
        got = data(await c.call_tool("get_endpoint", {"name": args.endpoint}), "get")
        check(got["name"] == e["name"] and got["status"] == "IDLE", f"endpoint {got}")
        print(json.dumps(got))


async def history(args):
    async with client(args) as c:
        print(json.dumps(data(await c.call_tool("endpoint_history", {"name": args.endpoint}), "history")))


async def read_only(args):
    """Against a server started with --mcp-read-only."""
    async with client(args) as c:
        names = {t.name for t in (await c.list_tools()).tools}
        check(names == READ_TOOLS, f"only reading tools are listed: {sorted(names)}")
        spec = open(args.spec).read()
        # Called anyway, as a client may: refused where tools are dispatched.
        for tool, params in [
            ("start_workflow", {"spec": spec}),
            ("create_endpoint", {"name": "nope"}),
            ("stop_workflow", {"id": "00000000"}),
            ("delete_endpoint", {"name": "nope"}),
        ]:
            r = await c.call_tool(tool, params)
            check(r.is_error and "read-only" in text_of(r), f"{tool}: {text_of(r)}")
        data(await c.call_tool("list_workflows", {}), "reads still work")
        print(json.dumps({"tools": sorted(names)}))


async def http_edges(args):
    """What a client without a token, or a web page of another origin, gets."""
    init = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-11-25",
            "capabilities": {},
            "clientInfo": {"name": "edge", "version": "0"},
        },
    }
    accept = {"Accept": "application/json, text/event-stream"}
    async with httpx2.AsyncClient(timeout=30) as h:
        r = await h.post(f"{args.url}/mcp", json=init, headers=accept)
        check(r.status_code == 401, f"no token: {r.status_code}")
        check(r.headers.get("www-authenticate", "").startswith("Bearer"), "401 names Bearer")
        r = await h.post(f"{args.url}/mcp", json=init, headers=dict(accept, Authorization="Bearer gantry_nope"))
        check(r.status_code == 401, f"bad token: {r.status_code}")
        auth = dict(accept, Authorization=f"Bearer {args.token}")
        r = await h.post(f"{args.url}/mcp", json=init, headers=dict(auth, Origin="http://evil.example"))
        check(r.status_code == 403, f"a foreign Origin: {r.status_code} {r.text}")
        r = await h.post(f"{args.url}/mcp", json=init, headers=dict(auth, Origin=args.url))
        check(r.status_code == 200, f"the server's own Origin: {r.status_code} {r.text}")
        session = r.headers["mcp-session-id"]
        # Another user's token cannot use this session.
        other = dict(accept, Authorization=f"Bearer {args.other_token}")
        other["Mcp-Session-Id"] = session
        other["MCP-Protocol-Version"] = "2025-11-25"
        r = await h.post(f"{args.url}/mcp", json={"jsonrpc": "2.0", "id": 2, "method": "tools/list"}, headers=other)
        check(r.status_code == 404, f"someone else's session: {r.status_code} {r.text}")
    print(json.dumps({"ok": True}))


SCENARIOS = {
    "tools": tools,
    "run": run,
    "isolation": isolation,
    "takeover": takeover,
    "stop": stop,
    "delete-endpoint": delete_endpoint,
    "create-endpoint": create_endpoint,
    "history": history,
    "read-only": read_only,
    "http-edges": http_edges,
}


def main():
    p = argparse.ArgumentParser()
    p.add_argument("scenario", choices=sorted(SCENARIOS))
    p.add_argument("--url", required=True)
    p.add_argument("--token", required=True)
    p.add_argument("--other-token")
    p.add_argument("--transport", choices=["http", "stdio"], default="http")
    p.add_argument("--mode", default="legacy", help="legacy, or a protocol version such as 2026-07-28")
    p.add_argument("--gantry", help="the gantry binary, for stdio")
    p.add_argument("--elicit", choices=["accept", "decline", "none"], default="none")
    p.add_argument("--with-token", action="store_true", help="after a refusal, confirm with its token")
    p.add_argument("--confirm-url", help="with --with-token: confirm through this server (another replica)")
    p.add_argument("--await-approval", action="store_true")
    p.add_argument("--unasked", action="store_true", help="expect it done without any question")
    p.add_argument("--spec")
    p.add_argument("--job", default="hello")
    p.add_argument("--workflow")
    p.add_argument("--endpoint")
    args = p.parse_args()
    try:
        asyncio.run(SCENARIOS[args.scenario](args))
    except AssertionError as e:
        print(f"FAILED {args.scenario} ({args.transport}, {args.mode}): {e}", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()

//! An MCP `tools/call`'s params (`{"name": TOOL, "arguments": {...}}`): the arguments read
//! into the tool's type as the server reads them, then the API's checks the tool goes through.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| gantry_fuzz::mcp(data));

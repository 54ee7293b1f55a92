//! Every JSON body `/api/v1` takes, with its route and path parameters: a first line
//! `METHOD /api/v1/PATH`, then the body. Decoded and checked as the handlers do before they
//! touch the store; see `gantry_fuzz::api`.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| gantry_fuzz::api(data));

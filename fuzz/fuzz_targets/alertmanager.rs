//! An Alertmanager webhook post: decoded, and each entry read into an alert (or ignored with
//! why), as the receiver does before it takes the holds lock.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| gantry_fuzz::alertmanager(data));

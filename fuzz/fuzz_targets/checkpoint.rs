//! Any bytes as an automation run's checkpoint: decoded, or "the checkpoint cannot be
//! read: …"; never a panic (a checkpoint is read back after a crash, from any version).
#![no_main]

use fronta_automation::executor::ExecState;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Err(message) = ExecState::decode(data) {
        assert!(message.starts_with("the checkpoint cannot be read"), "{message}");
    }
});

//! Wire frames from MQTT (`acoa_shared::wire`): the input as a frame (`open`, `verify`,
//! `decode_unverified`, `decode_verified`), and as the body of a frame signed by the trusted key,
//! which `decode_verified` must decode exactly when postcard decodes a `Message` from it. Every
//! message that decodes, of any variant, must round-trip (`acoa_fuzz::check_message`).
#![no_main]

use acoa_fuzz::{check_message, signed_wire_frame, verifying_key};
use acoa_shared::wire::{self, Message};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let key = verifying_key();
    if let Ok(env) = wire::open(data) {
        let signed = env.is_signed();
        let verified = env.verify(key);
        if !signed {
            assert_eq!(verified, Err(wire::WireError::Unsigned));
        }
        if let Ok(m) = env.message() {
            check_message(&m);
        }
    }
    let unverified = wire::decode_unverified(data);
    if let Ok(m) = wire::decode_verified(data, key) {
        assert_eq!(
            unverified.as_ref().map(|u| postcard::to_allocvec(u).ok()),
            Ok(postcard::to_allocvec(&m).ok()),
            "decode_verified and decode_unverified disagree"
        );
    }

    let frame = signed_wire_frame(data);
    let direct = postcard::from_bytes::<Message>(data);
    match wire::decode_verified(&frame, key) {
        Ok(m) => {
            assert!(
                direct.is_ok(),
                "decode_verified accepted a body postcard refuses"
            );
            check_message(&m);
        }
        Err(e) => assert!(
            direct.is_err(),
            "decode_verified refused a signed body that decodes: {e}"
        ),
    }
});

//! What the fuzz targets share: fixed keys, frames signed around fuzz bytes (a fuzzer cannot
//! forge an ed25519 signature, so the bodies behind signature checks are reached by signing
//! them here), and the round-trip checks of wire messages.

use std::sync::OnceLock;

use acoa_shared::jobs::JOB_SIGNING_CONTEXT;
use acoa_shared::wire::{self, Message, SIGNING_CONTEXT};
use ed25519_dalek::{Signer, SigningKey, VerifyingKey};

/// The key every target trusts (the control plane's, or a node's).
pub fn signing_key() -> &'static SigningKey {
    static KEY: OnceLock<SigningKey> = OnceLock::new();
    KEY.get_or_init(|| SigningKey::from_bytes(&[7; 32]))
}

pub fn verifying_key() -> &'static VerifyingKey {
    static KEY: OnceLock<VerifyingKey> = OnceLock::new();
    KEY.get_or_init(|| signing_key().verifying_key())
}

/// A frame `(version, body, signature)` as `wire::encode` lays it out, with `body` signed in
/// `context` by [`signing_key`].
pub fn frame(version: u16, context: &[u8], body: &[u8]) -> Vec<u8> {
    let mut signed = Vec::with_capacity(context.len() + body.len());
    signed.extend_from_slice(context);
    signed.extend_from_slice(body);
    let sig = signing_key().sign(&signed).to_bytes();
    postcard::to_allocvec(&(version, body, &sig[..])).expect("a frame always encodes")
}

/// A wire frame whose body is `body`, signed by the trusted key.
pub fn signed_wire_frame(body: &[u8]) -> Vec<u8> {
    frame(wire::VERSION, SIGNING_CONTEXT, body)
}

/// A scheduler job frame whose body is `body`, signed by the trusted key.
pub fn signed_job_frame(body: &[u8]) -> Vec<u8> {
    frame(acoa_shared::jobs::VERSION, JOB_SIGNING_CONTEXT, body)
}

/// Checks what holds for every message that decoded: it encodes, its encoding decodes to a
/// message of the same encoding (bytes are compared, not values: a float may be NaN), and it
/// survives `wire::encode` signed and `decode_verified`.
pub fn check_message(m: &Message) {
    let _ = m.kind();
    let b1 = postcard::to_allocvec(m).expect("a decoded message encodes");
    let m2: Message = postcard::from_bytes(&b1).expect("an encoded message decodes");
    let b2 = postcard::to_allocvec(&m2).expect("a decoded message encodes");
    assert_eq!(b1, b2, "encode -> decode -> encode changed the message");
    let f = wire::encode(m, Some(signing_key())).expect("a decoded message encodes in a frame");
    let m3 = wire::decode_verified(&f, verifying_key()).expect("a signed frame verifies");
    assert_eq!(
        postcard::to_allocvec(&m3).expect("a decoded message encodes"),
        b1,
        "a message changed through wire::encode and decode_verified"
    );
    assert_eq!(
        wire::decode_unverified(&wire::encode(m, None).expect("unsigned frame encodes"))
            .map(|m| postcard::to_allocvec(&m).expect("a decoded message encodes")),
        Ok(b1),
        "an unsigned frame changed the message"
    );
}

/// The fuzz input as text, when it is UTF-8 (every text decoder takes `&str`).
pub fn text(data: &[u8]) -> Option<&str> {
    std::str::from_utf8(data).ok()
}

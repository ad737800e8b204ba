//! Scheduler jobs and results (`acoa_shared::jobs`). The first byte picks what the rest is:
//! 0 a result frame from a worker (`decode_result`), 1 a job frame (`open_job`, `decode_job`),
//! 2 the body of a job frame signed by the trusted key (what a worker decodes after the
//! signature check), 3 a packed cluster snapshot (`unpack_cluster`, also after deflating it,
//! since random bytes rarely inflate). Whatever decodes must encode and decode back the same.
#![no_main]

use acoa_fuzz::{signed_job_frame, signing_key, verifying_key};
use acoa_shared::jobs::{self, JobError};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    match mode % 4 {
        0 => result(rest),
        1 => job(rest),
        2 => job(&signed_job_frame(rest)),
        _ => {
            cluster(rest);
            cluster(&miniz_oxide::deflate::compress_to_vec(rest, 1));
        }
    }
});

fn result(bytes: &[u8]) {
    let Ok(r) = jobs::decode_result(bytes) else {
        return;
    };
    let b1 = postcard::to_allocvec(&r).expect("a decoded result encodes");
    match jobs::encode_result(&r) {
        Ok(frame) => {
            let r2 = jobs::decode_result(&frame).expect("an encoded result decodes");
            assert_eq!(
                postcard::to_allocvec(&r2).expect("a decoded result encodes"),
                b1,
                "a result changed through encode_result and decode_result"
            );
        }
        Err(JobError::TooLarge { .. }) => {}
        Err(e) => panic!("a decoded result does not encode: {e}"),
    }
}

fn job(frame: &[u8]) {
    let key = verifying_key();
    let opened = jobs::open_job(frame, key);
    let decoded = jobs::decode_job(frame, key);
    if let Ok((_, packed)) = &opened {
        let unpacked = jobs::unpack_cluster(packed);
        assert_eq!(
            decoded.as_ref().map(|_| ()).map_err(|_| ()),
            unpacked.as_ref().map(|_| ()).map_err(|_| ()),
            "decode_job and open_job + unpack_cluster disagree"
        );
    } else {
        assert!(
            decoded.is_err(),
            "decode_job accepted what open_job refuses"
        );
    }
    let Ok(job) = decoded else {
        return;
    };
    match jobs::encode_job(&job, signing_key()) {
        Ok(again) => {
            let back = jobs::decode_job(&again, key).expect("an encoded job decodes");
            assert_eq!(back, job, "a job changed through encode_job and decode_job");
        }
        // A NaN or a deflate stream denser than the encoder's are refused, never sent.
        Err(JobError::NotExact(_) | JobError::TooLarge { .. }) => {}
        Err(e) => panic!("a decoded job does not encode: {e}"),
    }
}

fn cluster(packed: &[u8]) {
    let Ok(c) = jobs::unpack_cluster(packed) else {
        return;
    };
    match jobs::pack_cluster(&c) {
        Ok(p) => assert_eq!(
            jobs::unpack_cluster(&p).as_ref(),
            Ok(&c),
            "a cluster changed through pack_cluster and unpack_cluster"
        ),
        Err(JobError::NotExact(_)) => {}
        Err(e) => panic!("an unpacked cluster does not pack: {e}"),
    }
}

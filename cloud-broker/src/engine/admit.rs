//! Definitions read off the decision loop ([`crate::definitions`]) come in with what reading
//! them gave; the engine uses that outcome instead of reading the text again.
//!
//! Invariant: an outcome is used only for the application and text it was computed for;
//! anything else (a definition built as a value, one held while the store could not write)
//! is read here with the same [`validate`].

use acoa_shared::model::Application;

use super::{validate, Action, Engine};
use crate::status::digest;

/// What reading one definition gave.
#[derive(Debug)]
pub(super) struct Checked {
    app: String,
    digest: String,
    result: Result<Box<Application>, String>,
}

impl Engine {
    pub(super) fn on_app_checked(
        &mut self,
        app: String,
        payload: Vec<u8>,
        result: Result<Box<Application>, String>,
        out: &mut Vec<Action>,
    ) {
        self.checked = Some(Checked {
            app: app.clone(),
            digest: digest(&payload),
            result,
        });
        self.on_app(app, payload, out);
        self.checked = None;
    }

    /// What reading `payload` (digest `d`) as application `app` gives.
    pub(super) fn take_checked(
        &mut self,
        app: &str,
        d: &str,
        payload: &[u8],
    ) -> Result<Application, String> {
        match self.checked.take() {
            Some(c) if c.app == app && c.digest == d => c.result.map(|a| *a),
            _ => validate(app, payload),
        }
    }
}

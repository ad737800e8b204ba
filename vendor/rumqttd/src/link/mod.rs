pub mod alerts;
pub mod bridge;
pub mod console;
pub mod local;
pub mod meters;
pub mod network;
pub mod remote;
pub mod timer;

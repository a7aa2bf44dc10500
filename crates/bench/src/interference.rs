//! Stub: replaced by the interference helper's module at merge.
use crate::results::Interference;

pub const DEFAULT_DISTURBED_ABOVE_CORES: f64 = 0.15;

pub struct Watch;

impl Watch {
    pub fn start(_server_cpus: &[usize], _client_cpus: &[usize], _server_leader: Option<u32>) -> Watch {
        Watch
    }
    pub fn finish(self, _disturbed_above_cores: f64) -> Option<Interference> {
        None
    }
}

//! Admitting a connection that needs threads of its own (blocking: a receive and a send
//! thread each) only while their memory maps fit.
//!
//! Each thread maps its stack and the alternate signal stack std gives it, each with a guard
//! page: 4 maps (measured: 2,000 threads added 8,024). A process may hold vm.max_map_count maps.
//! Past them std cannot set up a new thread's signal stack and aborts the whole process from
//! inside that thread (seen at 8,182 connections, 16,364 threads, with the default 65,530), so
//! the connection is refused before its threads are started.

/// How many connections this process can give threads, from the limit and the maps it holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MapBudget {
    /// vm.max_map_count; 0 when unknown.
    pub max_map_count: u64,
    /// Connections that fit; None when unknown (no budget: a failed thread start is then the
    /// only guard).
    pub connections: Option<usize>,
}

impl MapBudget {
    pub const MAPS_PER_THREAD: u64 = 4;
    /// Maps kept free for everything else the process maps later (buffers, the allocator).
    pub const HEADROOM: u64 = 1024;

    /// The budget under `max_map_count` for a process holding `maps_in_use` maps, with
    /// `threads_per_connection` threads per connection; either unknown: no budget.
    pub fn new(max_map_count: Option<u64>, maps_in_use: Option<u64>, threads_per_connection: u64) -> MapBudget {
        match (max_map_count, maps_in_use) {
            (Some(limit), Some(used)) => MapBudget {
                max_map_count: limit,
                connections: Some(
                    (limit.saturating_sub(used + Self::HEADROOM)
                        / (threads_per_connection.max(1) * Self::MAPS_PER_THREAD)) as usize,
                ),
            },
            _ => MapBudget { max_map_count: 0, connections: None },
        }
    }

    /// Whether `open` connections (the new one counted) keep their threads' maps in budget.
    pub fn has_room(&self, open: usize) -> bool {
        self.connections.is_none_or(|max| open <= max)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_budget_leaves_room_for_every_admitted_connections_threads() {
        let budget = MapBudget::new(Some(65_530), Some(60), 2);
        // (65,530 − 60 − 1,024) / (2 threads × 4 maps) = 8,055 connections.
        assert_eq!(budget.connections, Some(8_055));
        assert!(budget.has_room(8_055) && !budget.has_room(8_056));
        assert_eq!(MapBudget::new(Some(500), Some(60), 2).connections, Some(0), "nothing fits under the headroom");
        let unknown = MapBudget::new(None, Some(60), 2);
        assert_eq!(unknown.connections, None);
        assert!(unknown.has_room(usize::MAX));
    }
}

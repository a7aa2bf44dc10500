//! The seed's published Table 6-3 ("I/O Method Performance Comparison"), as printed, so each
//! measured model can be shown beside its counterpart of twenty years before.
//!
//! The seed's setup, in its own words: an echo server on a Pentium 4 1.7 GHz Xeon with 768 MB,
//! clients on three machines (two Pentium 2, one Itanium) over a 100 Mb isolated hub, Windows
//! XP; connections in blocks of 1,000, rate-limited blocks at 200,000 B/s each. Its figures were
//! limited by its clients as much as by its servers, and its "non-paged pool" is the kernel
//! memory for sockets and their buffers together.

/// One row of the seed's table, as printed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SeedRow {
    pub attempted: u64,
    pub connected: u64,
    pub memory_kb: u64,
    pub non_paged_pool_kb: u64,
    pub cpu: &'static str,
    pub threads: u64,
    pub sent_per_s: u64,
    pub received_per_s: u64,
}

/// The seed's rows for one of its I/O models.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SeedModel {
    /// The seed's name for it.
    pub name: &'static str,
    /// The sockscale model that stands for it.
    pub counterpart: &'static str,
    pub rows: &'static [SeedRow],
}

const fn row(
    (attempted, connected): (u64, u64),
    memory_kb: u64,
    non_paged_pool_kb: u64,
    cpu: &'static str,
    threads: u64,
    (sent_per_s, received_per_s): (u64, u64),
) -> SeedRow {
    SeedRow { attempted, connected, memory_kb, non_paged_pool_kb, cpu, threads, sent_per_s, received_per_s }
}

/// Table 6-3, model by model. threadpool, epoll and tokio have no seed counterpart.
pub static TABLE_6_3: [SeedModel; 6] = [
    SeedModel {
        name: "Blocking",
        counterpart: "blocking",
        rows: &[
            row((7000, 1008), 25_632, 36_121, "10–60%", 2016, (2_198_148, 2_198_148)),
            row((12_000, 1008), 25_408, 36_352, "5–40%", 2016, (404_227, 402_227)),
        ],
    },
    SeedModel {
        name: "Non-blocking (select)",
        counterpart: "select",
        rows: &[
            row((7000, 4011), 4208, 135_123, "95–100%", 1, (0, 0)),
            row((12_000, 5779), 5224, 156_260, "95–100%", 1, (0, 0)),
        ],
    },
    SeedModel {
        name: "WSAAsyncSelect",
        counterpart: "signal",
        rows: &[
            row((7000, 1956), 3640, 38_246, "75–85%", 3, (1_610_204, 1_637_819)),
            row((12_000, 4077), 4884, 42_992, "90–100%", 3, (652_902, 652_902)),
        ],
    },
    SeedModel {
        name: "WSAEventSelect",
        counterpart: "poll64",
        rows: &[
            row((7000, 6999), 10_502, 36_402, "65–85%", 113, (4_921_350, 5_186_297)),
            row((12_000, 11_080), 19_214, 39_040, "50–60%", 192, (3_217_493, 3_217_493)),
            row((46_000, 45_933), 37_392, 121_624, "80–90%", 791, (3_851_059, 3_851_059)),
        ],
    },
    SeedModel {
        name: "Overlapped (events)",
        counterpart: "uring64",
        rows: &[
            row((7000, 5558), 21_844, 34_944, "65–85%", 66, (5_024_723, 4_095_644)),
            row((12_000, 12_000), 60_576, 48_060, "35–45%", 195, (1_803_878, 1_803_878)),
            row((49_000, 48_997), 241_208, 155_480, "85–95%", 792, (3_865_152, 3_834_511)),
        ],
    },
    SeedModel {
        name: "Overlapped (completion port)",
        counterpart: "uring",
        rows: &[
            row((7000, 7000), 36_160, 31_128, "40–50%", 2, (6_282_473, 3_893_507)),
            row((12_000, 12_000), 59_256, 38_862, "40–50%", 2, (5_027_914, 5_027_095)),
            row((50_000, 49_997), 242_272, 148_192, "55–65%", 2, (4_326_946, 4_326_496)),
        ],
    },
];

/// The seed's rows for the sockscale model `name`, if it has a counterpart.
pub fn counterpart_of(name: &str) -> Option<&'static SeedModel> {
    TABLE_6_3.iter().find(|m| m.counterpart == name)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every counterpart is a model sockscale has, named once.
    #[test]
    fn every_seed_model_stands_for_one_sockscale_model() {
        let names: Vec<&str> = sockscale_server::Model::ALL.iter().map(|m| m.name()).collect();
        let mut seen = std::collections::BTreeSet::new();
        for m in &TABLE_6_3 {
            assert!(names.contains(&m.counterpart), "{} stands for unknown model {}", m.name, m.counterpart);
            assert!(seen.insert(m.counterpart), "{} named twice", m.counterpart);
            assert!(m.rows.iter().all(|r| r.connected <= r.attempted), "{}", m.name);
        }
        for none in ["threadpool", "epoll", "tokio"] {
            assert!(counterpart_of(none).is_none(), "{none} has no seed row");
        }
    }
}

//! `--source`: the local addresses connections are made from.
//!
//! One source address gives at most one ephemeral-port range of connections to one server
//! address (about 28,000 here). A range such as `127.0.0.1-127.0.0.50` or a list
//! `127.0.0.1,127.0.0.2` multiplies that; sockets bind their source with
//! IP_BIND_ADDRESS_NO_PORT so the kernel picks the port at connect time, per 4-tuple.

use std::net::{IpAddr, Ipv4Addr};

pub fn parse_sources(text: &str) -> Result<Vec<IpAddr>, String> {
    let mut out = Vec::new();
    for part in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        if let Some((a, b)) = part.split_once('-') {
            let bad = || format!("'{part}' is not an IPv4 range like 127.0.0.1-127.0.0.50");
            let start: Ipv4Addr = a.trim().parse().map_err(|_| bad())?;
            let end: Ipv4Addr = b.trim().parse().map_err(|_| bad())?;
            let (s, e) = (u32::from(start), u32::from(end));
            if e < s || e - s > 65_535 {
                return Err(bad());
            }
            out.extend((s..=e).map(|v| IpAddr::V4(Ipv4Addr::from(v))));
        } else {
            out.push(part.parse().map_err(|_| format!("'{part}' is not an IP address"))?);
        }
    }
    if out.is_empty() {
        return Err("--source needs at least one address".into());
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_and_lists() {
        let v = parse_sources("127.0.0.1-127.0.0.3,10.0.0.9").unwrap();
        let shown: Vec<String> = v.iter().map(ToString::to_string).collect();
        assert_eq!(shown, ["127.0.0.1", "127.0.0.2", "127.0.0.3", "10.0.0.9"]);
        assert!(parse_sources("127.0.0.5-127.0.0.1").is_err());
        assert!(parse_sources("nope").is_err());
        assert!(parse_sources("").is_err());
    }
}

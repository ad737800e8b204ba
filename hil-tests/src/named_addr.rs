//! `name@ip:port` lists: how the testbed's collector and discovery service tell a workload
//! where its out channels or downstream calls go. Std only: the workload binaries, built with
//! plain rustc, include this file by path.

use std::net::SocketAddr;

/// One `name@ip:port`; `what` ("out channel", "call") and `shape` ("chan", "component") name
/// the item in errors.
pub fn parse_one(item: &str, what: &str, shape: &str) -> Result<(String, SocketAddr), String> {
    let (name, a) = item
        .trim()
        .split_once('@')
        .ok_or_else(|| format!("{what} {item:?}: expected {shape}@ip:port"))?;
    let a: SocketAddr = a
        .parse()
        .map_err(|_| format!("{what} {name}: bad address {a}"))?;
    Ok((name.to_string(), a))
}

/// `name@ip:port` items separated by `sep` (blank items skipped).
pub fn parse_list(
    s: &str,
    sep: char,
    what: &str,
    shape: &str,
) -> Result<Vec<(String, SocketAddr)>, String> {
    s.split(sep)
        .filter(|x| !x.trim().is_empty())
        .map(|x| parse_one(x, what, shape))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_addresses() {
        let l = parse_list(" a@10.0.0.1:9, ,b@10.0.0.2:10", ',', "out channel", "chan").unwrap();
        assert_eq!(
            l,
            vec![
                ("a".to_string(), "10.0.0.1:9".parse().unwrap()),
                ("b".to_string(), "10.0.0.2:10".parse().unwrap())
            ]
        );
        assert_eq!(
            parse_one("x", "call", "component").unwrap_err(),
            "call \"x\": expected component@ip:port"
        );
        assert_eq!(
            parse_one("m1@nope", "call", "component").unwrap_err(),
            "call m1: bad address nope"
        );
    }
}

//! The benchmarks' command line: `--flag value` pairs, anywhere. Included by path.

/// The value after `--flag` `name`, if given.
pub fn arg(name: &str) -> Option<String> {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1).cloned())
}

/// `--sizes` (comma-separated), else `default`.
pub fn sizes(default: &[usize]) -> Vec<usize> {
    arg("--sizes").map_or(default.to_vec(), |v| {
        v.split(',').map(|s| s.parse().expect("--sizes")).collect()
    })
}

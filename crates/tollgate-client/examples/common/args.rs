//! The flags both client demos take: `--seconds S` and `--tasks PER_HOST`.

use std::time::Duration;

/// Parses `--seconds` and `--tasks` (defaults given), or says what is wrong, with the usage
/// line of the example `name` for `--help`.
pub(crate) fn parse(name: &str, seconds: f64, tasks: usize) -> Result<(Duration, usize), String> {
    let (mut seconds, mut tasks) = (seconds, tasks);
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        let mut value = || args.next().ok_or(format!("{flag} needs a value"));
        match flag.as_str() {
            "--seconds" => seconds = value()?.parse().map_err(|e| format!("--seconds: {e}"))?,
            "--tasks" => tasks = value()?.parse().map_err(|e| format!("--tasks: {e}"))?,
            "-h" | "--help" => {
                return Err(format!("usage: {name} [--seconds S] [--tasks PER_HOST]"));
            }
            other => return Err(format!("unknown argument {other:?}")),
        }
    }
    let seconds = Duration::try_from_secs_f64(seconds).map_err(|e| format!("--seconds: {e}"))?;
    if tasks == 0 {
        return Err("--tasks must be at least 1".into());
    }
    Ok((seconds, tasks))
}

//! Status timestamps ("Status timestamps"): RFC 3339 UTC with milliseconds and
//! a `Z` on the way out; any RFC 3339 offset on the way in (ListTasks'
//! statusTimestampAfter).

use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

/// `2026-10-13T09:00:00.123Z` for milliseconds since the Unix epoch.
pub fn format_ms(ms: i64) -> String {
    let at = OffsetDateTime::from_unix_timestamp_nanos(i128::from(ms) * 1_000_000)
        .unwrap_or(OffsetDateTime::UNIX_EPOCH);
    format!(
        "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:03}Z",
        at.year(),
        u8::from(at.month()),
        at.day(),
        at.hour(),
        at.minute(),
        at.second(),
        at.millisecond()
    )
}

/// The first whole millisecond at or after an RFC 3339 timestamp, so that
/// "status.timestamp at or after it" compares in milliseconds without losing
/// a finer cutoff. None when `text` is not RFC 3339.
pub fn parse_cutoff_ms(text: &str) -> Option<i64> {
    let nanos = OffsetDateTime::parse(text, &Rfc3339)
        .ok()?
        .unix_timestamp_nanos();
    let ms = nanos.div_euclid(1_000_000) + i128::from(nanos.rem_euclid(1_000_000) != 0);
    i64::try_from(ms).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    // "Status timestamps": RFC 3339 UTC with milliseconds and a Z.
    #[test]
    fn formats_with_milliseconds_and_z() {
        assert_eq!(format_ms(1_760_346_000_123), "2025-10-13T09:00:00.123Z");
        assert_eq!(format_ms(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(format_ms(1_760_346_000_000), "2025-10-13T09:00:00.000Z");
    }

    // "ListTasks": statusTimestampAfter in any offset, inclusive.
    #[test]
    fn parses_any_offset() {
        let at = 1_760_346_000_123;
        assert_eq!(parse_cutoff_ms("2025-10-13T09:00:00.123Z"), Some(at));
        assert_eq!(parse_cutoff_ms("2025-10-13T11:00:00.123+02:00"), Some(at));
        assert_eq!(parse_cutoff_ms("2025-10-13T04:30:00.123-04:30"), Some(at));
        assert_eq!(
            parse_cutoff_ms("2025-10-13T09:00:00Z"),
            Some(1_760_346_000_000)
        );
        // A finer cutoff rounds up: .1231 excludes a task at .123.
        assert_eq!(parse_cutoff_ms("2025-10-13T09:00:00.1231Z"), Some(at + 1));
        assert_eq!(parse_cutoff_ms(&format_ms(at)), Some(at));
    }

    #[test]
    fn refuses_what_is_not_rfc_3339() {
        for text in [
            "",
            "2025-10-13",
            "2025-10-13T09:00:00",
            "yesterday",
            "1760346000",
        ] {
            assert_eq!(parse_cutoff_ms(text), None, "{text}");
        }
    }
}

//! JSON Pointers (RFC 6901) into what a source reads of an event: the
//! document `{"event": <the event as delivered>, "message": <the message
//! unwrapped>}`, so that a pointer says which of the two it reads
//! (`/message/order_id`, `/event/id`). serde_json's `Value::pointer`
//! resolves them; this module checks their syntax once, at start.

/// Checks `pointer` (the entry's `field`): `/event` or `/message`, or a
/// path below either, with `~` only in the escapes `~0` and `~1`.
pub(super) fn check(field: &str, pointer: &str) -> Result<String, String> {
    let root = pointer.split('/').nth(1);
    if !pointer.starts_with('/') || !matches!(root, Some("event" | "message")) {
        return Err(format!(
            "{field} {pointer:?} must start with /event or /message (a JSON Pointer, RFC 6901)"
        ));
    }
    let mut chars = pointer.chars();
    while let Some(c) = chars.next() {
        if c == '~' && !matches!(chars.next(), Some('0' | '1')) {
            return Err(format!(
                "{field} {pointer:?}: '~' must be followed by 0 or 1 (RFC 6901)"
            ));
        }
    }
    Ok(pointer.to_owned())
}

#[cfg(test)]
mod tests {
    use super::check;

    #[test]
    fn a_pointer_starts_at_the_event_or_the_message_and_escapes_tilde() {
        assert!(check("k", "/message").is_ok());
        assert!(check("k", "/event/detail/order~1id").is_ok());
        assert!(check("k", "/message/a~0b").is_ok());
        assert!(check("k", "").is_err());
        assert!(check("k", "message/id").is_err());
        assert!(check("k", "/detail/id").is_err());
        assert!(check("k", "/messages/id").is_err());
        assert!(check("k", "/message/a~2").is_err());
        assert!(check("k", "/message/a~").is_err());
    }
}

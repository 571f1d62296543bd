//! Reading Beam's JSON form of an event fast.
//!
//! An events file is almost always in the exact form Beam (and [`Event::to_json`]) writes: one
//! object per line, the fields in declaration order, no whitespace, integers without exponents,
//! strings with only the short escapes. [`parse`] reads that form in one pass over the bytes,
//! building the owned event directly: `memchr`'s vectorised search finds each string's end, and
//! the UTF-8 check is `simdutf8`'s. Anything else (another key order, whitespace, a `\u` escape,
//! a number out of range, a malformed line) makes the fast path give up, and the line goes to
//! `serde_json`, which accepts every valid form and names what is wrong with an invalid one. So
//! the fast path changes speed, never results: a line it accepts is one `serde_json` reads to the
//! same event.
//!
//! Measured on 1 M exported events (183 MB, one core): `serde_json` through an untagged enum
//! reads about 350 MB/s; typed `serde_json` with the kind picked from the first key about
//! 490 MB/s, `sonic-rs` about 410 MB/s and `simd-json` about 300 MB/s on these short objects
//! (each is one call per 180-byte line, where a SIMD parser's set-up is not repaid); this path
//! about 800 MB/s.
//!
//! Writing goes the other way by hand too ([`write_event`]): integers through `itoa`, and a
//! string copied whole once one vectorisable pass has found nothing in it to escape. The text is
//! `serde_json`'s own for the derived form, about three times as fast.

use crate::model::{Auction, Bid, Event, Person};

/// Appends `v` in decimal.
#[inline]
pub fn write_int(out: &mut String, v: i64) {
    out.push_str(itoa::Buffer::new().format(v));
}

/// Appends `s` as a JSON string, escaped exactly as `serde_json` escapes it: `"`, `\\` and the
/// control characters, with the short escapes where JSON has them.
#[inline]
pub fn write_str(out: &mut String, s: &str) {
    out.reserve(s.len() + 2);
    out.push('"');
    // One branch-free pass over the bytes, which the compiler vectorises, says which escapes
    // there are: usually none, and the string is copied whole.
    let (control, quote) = s.bytes().fold((false, false), |(c, q), b| (c | (b < 0x20), q | (b == b'"') | (b == b'\\')));
    if control {
        write_escaped(out, s, |rest| rest.iter().position(|&b| b < 0x20 || b == b'"' || b == b'\\'));
    } else if quote {
        write_escaped(out, s, |rest| memchr::memchr2(b'"', b'\\', rest));
    } else {
        out.push_str(s);
    }
    out.push('"');
}

/// Appends `s` escaped, `next` finding the next byte to escape.
fn write_escaped(out: &mut String, s: &str, next: impl Fn(&[u8]) -> Option<usize>) {
    let mut run = 0;
    while let Some(i) = next(&s.as_bytes()[run..]).map(|i| run + i) {
        // Every byte escaped is ASCII, so the runs between them end on character boundaries.
        out.push_str(&s[run..i]);
        run = i + 1;
        match s.as_bytes()[i] {
            b'"' => out.push_str("\\\""),
            b'\\' => out.push_str("\\\\"),
            0x08 => out.push_str("\\b"),
            0x0c => out.push_str("\\f"),
            b'\n' => out.push_str("\\n"),
            b'\r' => out.push_str("\\r"),
            b'\t' => out.push_str("\\t"),
            b => {
                const HEX: &[u8; 16] = b"0123456789abcdef";
                out.push_str("\\u00");
                out.push(char::from(HEX[usize::from(b >> 4)]));
                out.push(char::from(HEX[usize::from(b & 0xf)]));
            }
        }
    }
    out.push_str(&s[run..]);
}

/// Appends a bid in Beam's JSON form (the derived serde form's bytes).
pub fn write_bid(out: &mut String, b: &Bid) {
    out.push_str("{\"auction\":");
    write_int(out, b.auction);
    out.push_str(",\"bidder\":");
    write_int(out, b.bidder);
    out.push_str(",\"price\":");
    write_int(out, b.price);
    out.push_str(",\"dateTime\":");
    write_int(out, b.date_time);
    out.push_str(",\"extra\":");
    write_str(out, &b.extra);
    out.push('}');
}

/// Appends a person in Beam's JSON form.
pub fn write_person(out: &mut String, p: &Person) {
    out.push_str("{\"id\":");
    write_int(out, p.id);
    for (key, value) in [
        (",\"name\":", &p.name),
        (",\"emailAddress\":", &p.email_address),
        (",\"creditCard\":", &p.credit_card),
        (",\"city\":", &p.city),
        (",\"state\":", &p.state),
    ] {
        out.push_str(key);
        write_str(out, value);
    }
    out.push_str(",\"dateTime\":");
    write_int(out, p.date_time);
    out.push_str(",\"extra\":");
    write_str(out, &p.extra);
    out.push('}');
}

/// Appends an auction in Beam's JSON form.
pub fn write_auction(out: &mut String, a: &Auction) {
    out.push_str("{\"id\":");
    write_int(out, a.id);
    out.push_str(",\"itemName\":");
    write_str(out, &a.item_name);
    out.push_str(",\"description\":");
    write_str(out, &a.description);
    for (key, value) in [
        (",\"initialBid\":", a.initial_bid),
        (",\"reserve\":", a.reserve),
        (",\"dateTime\":", a.date_time),
        (",\"expires\":", a.expires),
        (",\"seller\":", a.seller),
        (",\"category\":", a.category),
    ] {
        out.push_str(key);
        write_int(out, value);
    }
    out.push_str(",\"extra\":");
    write_str(out, &a.extra);
    out.push('}');
}

/// Appends an event in Beam's JSON form (the inner object alone).
pub fn write_event(out: &mut String, e: &Event) {
    match e {
        Event::Person(p) => write_person(out, p),
        Event::Auction(a) => write_auction(out, a),
        Event::Bid(b) => write_bid(out, b),
    }
}

/// The JSON text `write` appends to an empty buffer.
pub fn to_string(write: impl FnOnce(&mut String)) -> String {
    let mut out = String::with_capacity(256);
    write(&mut out);
    out
}

/// Parses one line of Beam's JSON form. Lines in Beam's exact form take the fast path; every
/// other line is parsed by `serde_json`, and its error describes a malformed one.
pub fn parse(line: &[u8]) -> Result<Event, String> {
    if let Some(event) = canonical(line) {
        return Ok(event);
    }
    let text = std::str::from_utf8(line).map_err(|e| e.to_string())?;
    Event::from_json(text).map_err(|e| e.to_string())
}

/// The fast path: `Some` only for a line in Beam's exact form.
fn canonical(line: &[u8]) -> Option<Event> {
    let mut c = Cursor { b: line, i: 0 };
    let event = match line.get(2..5)? {
        b"auc" => {
            c.key(b"{\"auction\":")?;
            let auction = c.int()?;
            c.key(b",\"bidder\":")?;
            let bidder = c.int()?;
            c.key(b",\"price\":")?;
            let price = c.int()?;
            c.key(b",\"dateTime\":")?;
            let date_time = c.int()?;
            c.key(b",\"extra\":")?;
            let extra = c.string()?;
            Event::Bid(Bid { auction, bidder, price, date_time, extra })
        }
        b"id\"" => {
            c.key(b"{\"id\":")?;
            let id = c.int()?;
            if c.b.get(c.i..c.i + 7)? == b",\"name\"" {
                c.key(b",\"name\":")?;
                let name = c.string()?;
                c.key(b",\"emailAddress\":")?;
                let email_address = c.string()?;
                c.key(b",\"creditCard\":")?;
                let credit_card = c.string()?;
                c.key(b",\"city\":")?;
                let city = c.string()?;
                c.key(b",\"state\":")?;
                let state = c.string()?;
                c.key(b",\"dateTime\":")?;
                let date_time = c.int()?;
                c.key(b",\"extra\":")?;
                let extra = c.string()?;
                Event::Person(Box::new(Person { id, name, email_address, credit_card, city, state, date_time, extra }))
            } else {
                c.key(b",\"itemName\":")?;
                let item_name = c.string()?;
                c.key(b",\"description\":")?;
                let description = c.string()?;
                c.key(b",\"initialBid\":")?;
                let initial_bid = c.int()?;
                c.key(b",\"reserve\":")?;
                let reserve = c.int()?;
                c.key(b",\"dateTime\":")?;
                let date_time = c.int()?;
                c.key(b",\"expires\":")?;
                let expires = c.int()?;
                c.key(b",\"seller\":")?;
                let seller = c.int()?;
                c.key(b",\"category\":")?;
                let category = c.int()?;
                c.key(b",\"extra\":")?;
                let extra = c.string()?;
                Event::Auction(Box::new(Auction {
                    id,
                    item_name,
                    description,
                    initial_bid,
                    reserve,
                    date_time,
                    expires,
                    seller,
                    category,
                    extra,
                }))
            }
        }
        _ => return None,
    };
    c.key(b"}")?;
    (c.i == line.len()).then_some(event)
}

/// A position in a line.
struct Cursor<'a> {
    b: &'a [u8],
    i: usize,
}

impl Cursor<'_> {
    /// Steps over exactly `s`.
    #[inline]
    fn key(&mut self, s: &[u8]) -> Option<()> {
        (self.b.get(self.i..self.i + s.len())? == s).then(|| self.i += s.len())
    }

    /// A JSON integer that fits an `i64`: an optional minus, then `0` or digits not starting with
    /// `0`. What follows is left to the next [`Cursor::key`], so `1.5` or `1e3` fail there.
    #[inline]
    fn int(&mut self) -> Option<i64> {
        let b = self.b;
        let mut i = self.i;
        let negative = b.get(i) == Some(&b'-');
        i += negative as usize;
        let start = i;
        let mut v: i64 = 0;
        while let Some(&c) = b.get(i) {
            if !c.is_ascii_digit() {
                break;
            }
            let d = (c - b'0') as i64;
            v = if negative { v.checked_mul(10)?.checked_sub(d)? } else { v.checked_mul(10)?.checked_add(d)? };
            i += 1;
        }
        let digits = i - start;
        if digits == 0 || (digits > 1 && b[start] == b'0') {
            return None;
        }
        self.i = i;
        Some(v)
    }

    /// A JSON string with only the short escapes (`\"`, `\\`, `\/`, `\b`, `\f`, `\n`, `\r`,
    /// `\t`), valid UTF-8 and without control characters, as JSON requires, as a `String` or an
    /// `Arc<str>` (one allocation either way).
    #[inline]
    fn string<S: for<'s> From<&'s str>>(&mut self) -> Option<S> {
        let b = self.b;
        if b.get(self.i) != Some(&b'"') {
            return None;
        }
        let start = self.i + 1;
        let mut i = start;
        let mut unescaped: Option<Vec<u8>> = None;
        loop {
            let at = i + memchr::memchr2(b'"', b'\\', &b[i..])?;
            if b[at] == b'"' {
                let raw = match unescaped.as_mut() {
                    None => &b[start..at],
                    Some(v) => {
                        v.extend_from_slice(&b[i..at]);
                        v.as_slice()
                    }
                };
                if b[start..at].iter().any(|&c| c < 0x20) {
                    return None;
                }
                let s = S::from(simdutf8::basic::from_utf8(raw).ok()?);
                self.i = at + 1;
                return Some(s);
            }
            let v = unescaped.get_or_insert_with(|| Vec::with_capacity(at - start + 64));
            v.extend_from_slice(&b[i..at]);
            v.push(match *b.get(at + 1)? {
                b'"' => b'"',
                b'\\' => b'\\',
                b'/' => b'/',
                b'b' => 0x08,
                b'f' => 0x0c,
                b'n' => b'\n',
                b'r' => b'\r',
                b't' => b'\t',
                _ => return None,
            });
            i = at + 2;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each line parses to what `serde_json` gives, whichever path it takes, or fails on both.
    fn same(line: &str) {
        let slow = Event::from_json(line).map_err(|e| e.to_string());
        assert_eq!(parse(line.as_bytes()), slow, "{line}");
    }

    #[test]
    fn the_fast_path_agrees_with_serde_json() {
        let lines = [
            r#"{"auction":1000,"bidder":1001,"price":32530001,"dateTime":1436918400040,"extra":"fd\\Z`a\"b\/c\n"}"#,
            r#"{"id":1000,"name":"Peter Jones","emailAddress":"nhd@xcat.com","creditCard":"7241 7320 9143 4888","city":"Portland","state":"WY","dateTime":1436918400000,"extra":"WN_\\"}"#,
            r#"{"id":1001,"itemName":"z ck w","description":"cw","initialBid":25626290,"reserve":28805847,"dateTime":1436918400020,"expires":1436918412010,"seller":1000,"category":12,"extra":"jz"}"#,
            r#"{"auction":-9223372036854775808,"bidder":0,"price":9223372036854775807,"dateTime":-1,"extra":""}"#,
            r#"{"auction":1,"bidder":2,"price":3,"dateTime":4,"extra":"é\u00e9"}"#,
            r#"{"bidder":2,"auction":1,"price":3,"dateTime":4,"extra":"x"}"#,
            r#"{"auction":1, "bidder":2,"price":3,"dateTime":4,"extra":"x"}"#,
            r#"{"auction":1,"bidder":2,"price":3,"dateTime":4,"extra":"x"} "#,
            r#"{"auction":1,"bidder":2,"price":3,"dateTime":4,"extra":"x","more":1}"#,
            r#"{"auction":9223372036854775808,"bidder":2,"price":3,"dateTime":4,"extra":"x"}"#,
            r#"{"auction":01,"bidder":2,"price":3,"dateTime":4,"extra":"x"}"#,
            r#"{"auction":1.5,"bidder":2,"price":3,"dateTime":4,"extra":"x"}"#,
            r#"{"auction":1e3,"bidder":2,"price":3,"dateTime":4,"extra":"x"}"#,
            r#"{"auction":-,"bidder":2,"price":3,"dateTime":4,"extra":"x"}"#,
            "{\"auction\":1,\"bidder\":2,\"price\":3,\"dateTime\":4,\"extra\":\"a\tb\"}",
            r#"{"auction":1,"bidder":2,"price":3,"dateTime":4,"extra":"x\q"}"#,
            r#"{"auction":1,"bidder":2,"price":3,"dateTime":4,"extra":"x"#,
            r#"{"auction":1,"bidder":2,"price":3,"dateTime":4,"extra":"x\"#,
            r#"{"auction":1,"bidder":2,"price":3,"dateTime":4}"#,
            r#"{"id":1,"name":"a"}"#,
            r#"{"id":1}"#,
            r#"{"#,
            "",
            "not json",
        ];
        for line in lines {
            same(line);
        }
        assert!(canonical(lines[0].as_bytes()).is_some() && canonical(lines[1].as_bytes()).is_some());
        assert!(canonical(lines[2].as_bytes()).is_some() && canonical(lines[3].as_bytes()).is_some());
        assert!(canonical(lines[4].as_bytes()).is_none(), "a \\u escape is left to serde_json");
        // Invalid UTF-8 fails on both paths.
        let mut bad = br#"{"auction":1,"bidder":2,"price":3,"dateTime":4,"extra":"x"}"#.to_vec();
        let x = bad.iter().position(|&c| c == b'x').unwrap_or(0);
        bad[x] = 0xff;
        assert!(canonical(&bad).is_none() && parse(&bad).is_err());
    }

    #[test]
    fn events_are_written_as_serde_json_writes_them() {
        let config = crate::NexmarkConfig { num_events: 2000, ..Default::default() };
        let mut events: Vec<Event> = crate::generator::split_events(&config).map(|n| n.event).collect();
        // Strings that need escaping, and the extremes of the integers.
        let odd = "q\"u\\o\te\n\u{1}\u{8}\u{c}\r\u{1f}\u{7f}é/";
        events.push(Event::Bid(Bid {
            auction: i64::MIN,
            bidder: i64::MAX,
            price: 0,
            date_time: -1,
            extra: odd.into(),
        }));
        events.push(Event::Bid(Bid { auction: 1, bidder: 2, price: 3, date_time: 4, extra: "a\\b\"c\\\\é".into() }));
        if let Some(Event::Person(p)) = events.iter().find(|e| matches!(e, Event::Person(_))).cloned() {
            events.push(Event::Person(Box::new(Person { name: odd.into(), city: String::new(), ..*p })));
        }
        if let Some(Event::Auction(a)) = events.iter().find(|e| matches!(e, Event::Auction(_))).cloned() {
            events.push(Event::Auction(Box::new(Auction { description: odd.into(), reserve: i64::MIN, ..*a })));
        }
        for e in &events {
            let want = match e {
                Event::Person(p) => serde_json::to_string(p),
                Event::Auction(a) => serde_json::to_string(a),
                Event::Bid(b) => serde_json::to_string(b),
            };
            assert_eq!(to_string(|out| write_event(out, e)), want.unwrap());
        }
    }

    #[test]
    fn generated_events_take_the_fast_path() {
        let config = crate::NexmarkConfig { num_events: 2000, ..Default::default() };
        for next in crate::generator::split_events(&config) {
            let line = next.event.to_json();
            assert_eq!(canonical(line.as_bytes()).as_ref(), Some(&next.event), "{line}");
        }
    }
}

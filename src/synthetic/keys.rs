//! The key space of a synthetic bucket: pure functions from an index to a
//! key, its age and its ETag, and back. Every family of keys (one scope's
//! records, the tasks, the payloads) is generated in byte order of its
//! index, so a listing from any key is a binary search and a walk.

use chrono::Duration;

const DAY: i64 = 86_400;
/// Records written over this many days: the 31st is the day past the TTL.
pub const DAYS: u64 = 31;

/// What a synthetic bucket holds.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Shape {
    /// Live records (within their 30-day TTL); a thirtieth more are the
    /// day's records past it.
    pub live: u64,
    /// Scopes (task types), `type_00000` on; records spread over them by a
    /// Zipf law of exponent `zipf` (scope k has a share ∝ 1/(k+1)^zipf).
    pub scopes: u32,
    /// The Zipf law's exponent.
    pub zipf: f64,
    /// One task per live record; every `payload_every`-th task has an
    /// offloaded input; every `orphan_every`-th payload names no task.
    pub payload_every: u64,
    /// See `payload_every`.
    pub orphan_every: u64,
}

impl Shape {
    /// `live` records over 1,000 scopes by Zipf's law (s = 1: the largest
    /// scope holds 13 %, the 10 largest 39 %), a payload for 1 % of tasks,
    /// an orphan among 1,000 payloads.
    pub fn zipf(live: u64) -> Self {
        Shape {
            live,
            scopes: 1000,
            zipf: 1.0,
            payload_every: 100,
            orphan_every: 1000,
        }
    }
}

/// SplitMix64: a well-spread 64-bit hash of `x`.
pub fn mix(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Appends the low `digits` hex digits of `v` (without the allocation and
/// the formatting machinery of `format!`: keys are made per record listed).
pub fn push_hex(out: &mut String, v: u64, digits: u32) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    for k in (0..digits).rev() {
        out.push(char::from(HEX[((v >> (4 * k)) & 15) as usize]));
    }
}

/// A family of generated keys.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Family {
    /// One scope's records, `idempotency/{scope}/{hash}.json`.
    Records(u32),
    /// Offloaded inputs, `payloads/{task id}/input.json`.
    Payloads,
    /// Task objects, `tasks/{shard}/{task id}.json`.
    Tasks,
}

/// The bucket's layout: how many keys each family has.
#[derive(Debug)]
pub struct Layout {
    /// What it was made from.
    pub shape: Shape,
    /// Records of each scope, the expired included.
    pub counts: Vec<u64>,
    /// The expired records of the scopes before each (the deletion bitmap's
    /// index).
    pub expired_before: Vec<u64>,
    /// Task objects.
    pub tasks: u64,
    task_step: u64,
    /// Payloads (orphans included).
    pub payloads: u64,
    /// Each family's prefix: the scopes' in order, then the payloads' and
    /// the tasks'.
    prefixes: Vec<String>,
}

impl Layout {
    /// The layout of `shape`.
    pub fn new(shape: Shape) -> Self {
        let total = shape.live * DAYS / (DAYS - 1);
        let weights: Vec<f64> = (0..shape.scopes)
            .map(|k| 1.0 / f64::from(k + 1).powf(shape.zipf))
            .collect();
        let sum: f64 = weights.iter().sum();
        let counts: Vec<u64> = weights
            .iter()
            .map(|w| ((total as f64 * w / sum) as u64).max(1))
            .collect();
        let mut expired_before = Vec::with_capacity(counts.len() + 1);
        let mut acc = 0;
        for c in &counts {
            expired_before.push(acc);
            acc += c / DAYS;
        }
        expired_before.push(acc);
        let tasks = shape.live.max(1);
        let prefixes = (0..shape.scopes)
            .map(|s| format!("idempotency/{}/", scope_name(s)))
            .chain(["payloads/".to_owned(), "tasks/".to_owned()])
            .collect();
        Layout {
            prefixes,
            counts,
            expired_before,
            tasks,
            task_step: ((1u64 << 48) / tasks).max(1),
            payloads: tasks.div_ceil(shape.payload_every),
            shape,
        }
    }

    /// Every family, in the byte order of their keys.
    pub fn families(&self) -> impl Iterator<Item = Family> + '_ {
        (0..self.shape.scopes)
            .map(Family::Records)
            .chain([Family::Payloads, Family::Tasks])
    }

    /// What every key of `f` starts with.
    pub fn prefix(&self, f: Family) -> &str {
        let n = self.shape.scopes as usize;
        &self.prefixes[match f {
            Family::Records(s) => s as usize,
            Family::Payloads => n,
            Family::Tasks => n + 1,
        }]
    }

    /// How many keys `f` has.
    pub fn len(&self, f: Family) -> u64 {
        match f {
            Family::Records(s) => self.counts[s as usize],
            Family::Payloads => self.payloads,
            Family::Tasks => self.tasks,
        }
    }

    /// The key of index `i` of `f`.
    pub fn key(&self, f: Family, i: u64) -> String {
        match f {
            Family::Records(s) => {
                let step = u64::MAX / self.counts[s as usize];
                let h = mix(u64::from(s) << 40 ^ i);
                let prefix = self.prefix(f);
                let mut k = String::with_capacity(prefix.len() + 69);
                k.push_str(prefix);
                for v in [i * step, h, mix(h), mix(h ^ 1)] {
                    push_hex(&mut k, v, 16);
                }
                k.push_str(".json");
                k
            }
            Family::Tasks => {
                let mut k = String::with_capacity(50);
                k.push_str("tasks/");
                // The shard: the id's first digit.
                push_hex(&mut k, (i * self.task_step) >> 44, 1);
                k.push('/');
                self.push_task_id(&mut k, i, false);
                k.push_str(".json");
                k
            }
            Family::Payloads => {
                let orphan = i % self.shape.orphan_every == self.shape.orphan_every - 1;
                let mut k = String::with_capacity(56);
                k.push_str("payloads/");
                self.push_task_id(&mut k, i * self.shape.payload_every, orphan);
                k.push_str("/input.json");
                k
            }
        }
    }

    /// Task `j`'s id (an orphan payload's: the same but its last twelve
    /// digits, which no task has).
    pub fn task_id(&self, j: u64, orphan: bool) -> String {
        let mut id = String::with_capacity(36);
        self.push_task_id(&mut id, j, orphan);
        id
    }

    /// Appends task `j`'s id (see [`Layout::task_id`]): a UUID v4's form.
    fn push_task_id(&self, out: &mut String, j: u64, orphan: bool) {
        let hi = j * self.task_step;
        let m = mix(j ^ 0x7a5c);
        let tail = (m & 0x7FFF_FFFF_FFFF) | if orphan { 0x8000_0000_0000 } else { 0 };
        push_hex(out, hi >> 16, 8);
        out.push('-');
        push_hex(out, hi & 0xFFFF, 4);
        out.push_str("-4");
        push_hex(out, (m >> 48) & 0xFFF, 3);
        out.push('-');
        push_hex(out, 0x8000 | ((m >> 32) & 0x3FFF), 4);
        out.push('-');
        push_hex(out, tail, 12);
    }

    /// The family and index of a generated key; `None` for any other.
    pub fn parse(&self, key: &str) -> Option<(Family, u64)> {
        let (f, i) = if let Some(rest) = key.strip_prefix("idempotency/") {
            let (scope, file) = rest.split_once('/')?;
            let s: u32 = scope.strip_prefix("type_")?.parse().ok()?;
            if s >= self.shape.scopes {
                return None;
            }
            let v = u64::from_str_radix(file.get(..16)?, 16).ok()?;
            let step = u64::MAX / self.counts[s as usize];
            (v % step == 0).then_some((Family::Records(s), v / step))?
        } else if let Some(rest) = key.strip_prefix("tasks/") {
            let id = rest.split_once('/')?.1;
            (Family::Tasks, self.task_index(id)?)
        } else if let Some(rest) = key.strip_prefix("payloads/") {
            let j = self.task_index(rest.split_once('/')?.0)?;
            let every = self.shape.payload_every;
            (j % every == 0).then_some((Family::Payloads, j / every))?
        } else {
            return None;
        };
        (i < self.len(f) && self.key(f, i) == key).then_some((f, i))
    }

    fn task_index(&self, id: &str) -> Option<u64> {
        let hi = u64::from_str_radix(&format!("{}{}", id.get(..8)?, id.get(9..13)?), 16).ok()?;
        (hi % self.task_step == 0).then_some(hi / self.task_step)
    }

    /// How long before the bucket's instant the key was written.
    pub fn age(&self, f: Family, i: u64) -> Duration {
        let secs = match f {
            // Day i mod 31, at a second of its own: the 31st day's records
            // are past the 30-day TTL.
            Family::Records(s) => {
                (i % DAYS) as i64 * DAY + (mix(u64::from(s) << 40 ^ i ^ 0x5eed) % DAY as u64) as i64
            }
            Family::Tasks => (mix(i ^ 0x7a5c) % (30 * DAY as u64)) as i64,
            Family::Payloads => {
                (mix((i * self.shape.payload_every) ^ 0x7a5c) % (30 * DAY as u64)) as i64
            }
        };
        Duration::seconds(secs)
    }

    /// Record `i` of scope `s` is past its TTL (the 31st day's).
    pub fn expired(i: u64) -> bool {
        i % DAYS == DAYS - 1
    }

    /// The deletion bitmap's index of expired record `i` of scope `s`.
    pub fn expired_index(&self, s: u32, i: u64) -> u64 {
        self.expired_before[s as usize] + i / DAYS
    }

    /// The generated object's ETag (from its index: as unique as S3's).
    pub fn etag(f: Family, i: u64) -> String {
        let tag = match f {
            Family::Records(s) => u64::from(s) + 2,
            Family::Payloads => 0,
            Family::Tasks => 1,
        };
        let h = mix(tag << 48 ^ i);
        let mut e = String::with_capacity(34);
        e.push('"');
        push_hex(&mut e, h, 16);
        push_hex(&mut e, mix(h), 16);
        e.push('"');
        e
    }

    /// The first index of `f` whose key is past `bound` (`strict`) or at
    /// or past it.
    pub fn lower_bound(&self, f: Family, bound: &str, strict: bool) -> u64 {
        let (mut lo, mut hi) = (0, self.len(f));
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            let k = self.key(f, mid);
            let before = if strict {
                k.as_str() <= bound
            } else {
                k.as_str() < bound
            };
            if before { lo = mid + 1 } else { hi = mid }
        }
        lo
    }

    /// The indexes of `f` whose keys start with `prefix`.
    pub fn span(&self, f: Family, prefix: &str) -> std::ops::Range<u64> {
        let fp = self.prefix(f);
        if fp.starts_with(prefix) {
            return 0..self.len(f);
        }
        if !prefix.starts_with(fp) {
            return 0..0;
        }
        let lo = self.lower_bound(f, prefix, false);
        // Past every key that starts with `prefix`.
        let hi = self.lower_bound(f, &format!("{prefix}\u{10FFFF}"), false);
        lo..hi
    }
}

/// The name of scope `s`.
pub fn scope_name(s: u32) -> String {
    format!("type_{s:05}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_family_is_generated_in_byte_order_and_parses_back() {
        let l = Layout::new(Shape::zipf(100_000));
        for f in [
            Family::Records(0),
            Family::Records(999),
            Family::Tasks,
            Family::Payloads,
        ] {
            let n = l.len(f);
            assert!(n > 0);
            let mut last = String::new();
            for i in (0..n).step_by((n as usize / 500).max(1)) {
                let k = l.key(f, i);
                assert!(k > last, "{k} after {last}");
                assert_eq!(l.parse(&k), Some((f, i)), "{k}");
                last = k;
            }
        }
        assert_eq!(l.parse("idempotency/type_00000/zz.json"), None);
        assert_eq!(l.parse("tasks/0/nope.json"), None);
    }

    #[test]
    fn an_orphan_payload_names_no_task_and_the_others_name_theirs() {
        let l = Layout::new(Shape::zipf(100_000));
        let orphan = l.key(Family::Payloads, 999);
        let id = orphan.split('/').nth(1).unwrap();
        assert_eq!(l.parse(&format!("tasks/{}/{id}.json", &id[..1])), None);
        let kept = l.key(Family::Payloads, 998);
        let id = kept.split('/').nth(1).unwrap();
        assert!(l.parse(&format!("tasks/{}/{id}.json", &id[..1])).is_some());
    }
}

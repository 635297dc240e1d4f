//! `idem doctor --probe`: what a store can do, measured rather than
//! assumed (docs/protocol.md, "Stores other than AWS S3"; the README's table
//! of stores).
//!
//! The probe writes, reads and deletes a handful of objects under
//! `sweeper/probe/{run}/` and removes every one of them (every version, on a
//! versioned bucket) before it answers. It measures:
//!
//! | capability | how | if missing |
//! | --- | --- | --- |
//! | `create_only` | a second `If-None-Match: *` PUT of a key is a 412, and of 16 racing ones exactly one wins | refused: two submits of one key could both write their record, and one key would get two tasks |
//! | `compare_and_swap` | `If-Match` with the current ETag writes, with a stale one is a 412, on a missing key writes nothing (404 or 412) | refused: an expired record could be replaced twice, by two submits at once |
//! | `conditional_delete` | a DELETE with a stale `If-Match` is a 412 and leaves the object | `CONDITIONAL_DELETE=off` |
//! | `byte_order_listing` | keys chosen to tell orders apart (`a-b/1`, `a.b/1`, `a/1`, `a0`, ...) come back in byte order, a key a page and all in one page | `LIST_ORDER=any` |
//! | `start_after` | `StartAfter` gives exactly the keys after it in byte order | `LIST_ORDER=any` |
//! | `notifications` | the bucket's notification configuration sends record writes to a queue (read by `idem doctor`, not probed) | `RECORD_EVENTS=submitter` |
//! | `versioning` | a write names a version | buquet's workers need `BUQUET_ALLOW_NO_VERSIONING=1` |
//!
//! A store without atomic create-only PUTs or compare-and-swap cannot host
//! the service: every guarantee rests on them. The probe says so
//! (`can_host: false`) and `idem` exits 5.

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Arc;

use bytes::Bytes;
use serde::Serialize;

use crate::store::{ETag, PutMode, Store, StoreError};

/// Where the probe's objects live while it runs.
pub const PROBE_PREFIX: &str = "sweeper/probe/";

/// How many creates race for one key.
pub const RACERS: usize = 16;

/// The keys the listing check writes, in byte order. Folders first (as
/// SeaweedFS lists) puts `a/1` before `a-b/1` and `a.b/1`; eight keys make
/// a shuffled listing come back in byte order once in 40,320.
const LIST_KEYS: [&str; 8] = ["a-b/1", "a.b/1", "a/1", "a0", "b/1", "b/2", "c", "d/e/f"];

/// Each capability of section 6b, `true` when the store has it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Capabilities {
    /// `If-None-Match: *` refuses a taken key, and of [`RACERS`] racing
    /// creates exactly one wins.
    pub create_only: bool,
    /// `If-Match` writes only over the ETag it names, and writes nothing for
    /// a missing key.
    pub compare_and_swap: bool,
    /// A DELETE with a stale `If-Match` is refused.
    pub conditional_delete: bool,
    /// Listings come in the byte order of keys.
    pub byte_order_listing: bool,
    /// `StartAfter` is honoured, in byte order.
    pub start_after: bool,
    /// Record writes are sent to a queue by the bucket.
    pub notifications: bool,
    /// Writes keep versions.
    pub versioning: bool,
}

/// What one check saw.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Finding {
    /// What was measured.
    pub capability: &'static str,
    /// Whether the store has it.
    pub ok: bool,
    /// What was seen.
    pub detail: String,
}

/// The probe's answer: `idem doctor --probe` prints it as `probe`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ProbeReport {
    /// The capabilities found.
    pub capabilities: Capabilities,
    /// The settings this store needs, variable by variable (section 7).
    pub settings: BTreeMap<&'static str, &'static str>,
    /// Whether the service can run on this store at all.
    pub can_host: bool,
    /// Why not, when it cannot.
    pub refused: Vec<String>,
    /// Creates that won the race for one key (1 on a store that can host
    /// the service; 0 when the winner's answer timed out).
    pub create_only_winners: usize,
    /// What `If-Match` on a PUT of a missing key answered: 404 (S3), 412
    /// (SeaweedFS), or `wrote` (no compare-and-swap). The protocol treats
    /// 404 and 412 alike.
    pub compare_and_swap_missing_key: String,
    /// Each measurement.
    pub findings: Vec<Finding>,
    /// Probe objects it could not remove (empty when it left nothing).
    pub left_behind: Vec<String>,
}

/// The settings a guarantee of this service depends on (section 7). The
/// queue's workers' own `BUQUET_ALLOW_NO_VERSIONING` is named in
/// `settings` but is not this service's to check.
pub const GUARDED: [&str; 3] = ["CONDITIONAL_DELETE", "LIST_ORDER", "RECORD_EVENTS"];

impl ProbeReport {
    /// The settings of [`GUARDED`] this store needs that the process does
    /// not run with (`configured`: variable → value; an absent variable has
    /// its default, which is never what the probe asks for).
    pub fn mismatches(&self, configured: &BTreeMap<&'static str, String>) -> Vec<String> {
        self.settings
            .iter()
            .filter(|(var, _)| GUARDED.contains(var))
            .filter(|(var, want)| {
                configured
                    .get(*var)
                    .is_none_or(|have| !have.eq_ignore_ascii_case(want))
            })
            .map(|(var, want)| format!("{var}={want}"))
            .collect()
    }
}

/// A request, tried again while the store answers something retryable
/// (never for the races, whose every answer counts).
async fn again<T, F, Fut>(mut f: F) -> Result<T, StoreError>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, StoreError>>,
{
    let mut last = StoreError::Unavailable("no attempt".into());
    for attempt in 0..4u64 {
        if attempt > 0 {
            tokio::time::sleep(std::time::Duration::from_millis(50 * attempt)).await;
        }
        match f().await {
            Err(e) if e.is_retryable() => last = e,
            other => return other,
        }
    }
    Err(last)
}

fn finding(capability: &'static str, ok: bool, detail: impl Into<String>) -> Finding {
    Finding {
        capability,
        ok,
        detail: detail.into(),
    }
}

/// Measures `store` under `sweeper/probe/{run}/` and removes what it wrote.
/// `notifications`: whether the bucket's notification sends record writes
/// to a queue, as `idem doctor` read it (`None`: it could not be read).
pub async fn probe(store: Arc<dyn Store>, notifications: Option<bool>) -> ProbeReport {
    let run = format!("{PROBE_PREFIX}{}/", uuid::Uuid::new_v4());
    let mut findings = Vec::new();

    let (create_only, winners, versioning) = probe_create(&store, &run, &mut findings).await;
    let (compare_and_swap, missing) = probe_cas(&store, &run, &mut findings).await;
    let conditional_delete = probe_delete(&store, &run, &mut findings).await;
    let (byte_order_listing, start_after) = probe_listing(&store, &run, &mut findings).await;
    findings.push(finding(
        "versioning",
        versioning,
        if versioning {
            "writes name a version".to_owned()
        } else {
            "writes name no version: buquet's workers need BUQUET_ALLOW_NO_VERSIONING=1; this service's guarantees hold either way".to_owned()
        },
    ));
    findings.push(finding(
        "notifications",
        notifications == Some(true),
        match notifications {
            Some(true) => "record writes go to a queue",
            Some(false) => "no notification of record writes to a queue: RECORD_EVENTS=submitter",
            None => "the notification configuration could not be read: RECORD_EVENTS=submitter",
        },
    ));

    let left_behind = clean_up(&store, &run).await;
    let capabilities = Capabilities {
        create_only,
        compare_and_swap,
        conditional_delete,
        byte_order_listing,
        start_after,
        notifications: notifications == Some(true),
        versioning,
    };
    let mut refused = Vec::new();
    if !create_only {
        refused.push(
            "no atomic create-only PUT (If-None-Match: *): two submits of one key could both \
             write their record, and the key would get two tasks"
                .to_owned(),
        );
    }
    if !compare_and_swap {
        refused.push(
            "no compare-and-swap PUT (If-Match): two submits could both replace one expired \
             record, and the key would get two tasks"
                .to_owned(),
        );
    }
    ProbeReport {
        settings: settings_for(&capabilities),
        can_host: refused.is_empty(),
        refused,
        capabilities,
        create_only_winners: winners,
        compare_and_swap_missing_key: missing,
        findings,
        left_behind,
    }
}

/// The settings section 6b asks of a store with `c`.
pub fn settings_for(c: &Capabilities) -> BTreeMap<&'static str, &'static str> {
    let mut s = BTreeMap::new();
    if !c.conditional_delete {
        s.insert("CONDITIONAL_DELETE", "off");
    }
    if !c.byte_order_listing || !c.start_after {
        s.insert("LIST_ORDER", "any");
    }
    if !c.notifications {
        s.insert("RECORD_EVENTS", "submitter");
    }
    if !c.versioning {
        s.insert("BUQUET_ALLOW_NO_VERSIONING", "1");
    }
    s
}

/// A second create of a key is refused, and racing creates have one
/// winner (and the object is the winner's): `(create_only, winners,
/// versioning)`.
async fn probe_create(
    store: &Arc<dyn Store>,
    run: &str,
    findings: &mut Vec<Finding>,
) -> (bool, usize, bool) {
    let key = format!("{run}create");
    let first = again(|| store.put(&key, Bytes::from_static(b"1"), PutMode::Create)).await;
    let versioning = first.as_ref().is_ok_and(|p| p.version_id.is_some());
    let second = again(|| store.put(&key, Bytes::from_static(b"2"), PutMode::Create)).await;
    let refuses = match (&first, &second) {
        (Ok(_), Err(StoreError::PreconditionFailed)) => true,
        (Ok(_), Ok(_)) => {
            findings.push(finding(
                "create_only",
                false,
                "If-None-Match: * on a taken key wrote it: the condition is ignored",
            ));
            false
        }
        (Err(e), _) | (_, Err(e)) => {
            findings.push(finding(
                "create_only",
                false,
                format!("If-None-Match: * is not served: {e}"),
            ));
            false
        }
    };

    let race = race_creates(store, format!("{run}race")).await;
    let atomic = race.atomic();
    findings.push(finding("create_only", refuses && atomic, race.describe()));
    (refuses && atomic, race.won.len(), versioning)
}

/// What [`RACERS`] racing create-only PUTs of one key did.
struct Race {
    /// The racers whose PUT was answered 200.
    won: Vec<usize>,
    /// Those whose outcome is unknown: their answer timed out.
    timed_out: Vec<usize>,
    /// Answers no create-only PUT may give.
    unexpected: Vec<String>,
    /// Whether the object holds one racer's write, the winner's.
    holds_winner: bool,
}

impl Race {
    /// One winner at most, whose write the object holds, and nothing else.
    fn atomic(&self) -> bool {
        self.won.len() <= 1 && self.holds_winner && self.unexpected.is_empty()
    }

    /// The finding's words: how many won, and what else happened.
    fn describe(&self) -> String {
        format!(
            "{} of {RACERS} racing If-None-Match: * creates won{}{}{}",
            self.won.len(),
            if self.timed_out.is_empty() {
                String::new()
            } else {
                format!(
                    ", {} timed out waiting for the others (the object is {})",
                    self.timed_out.len(),
                    if self.holds_winner {
                        "one write, as it must be"
                    } else {
                        "not the winner's"
                    }
                )
            },
            if self.won.len() == 1 && !self.holds_winner {
                ", but the object is not the winner's"
            } else {
                ""
            },
            if self.unexpected.is_empty() {
                String::new()
            } else {
                format!("; other answers: {}", self.unexpected.join(", "))
            }
        )
    }
}

/// Races [`RACERS`] create-only PUTs of the key `race`, then reads it.
async fn race_creates(store: &Arc<dyn Store>, race: String) -> Race {
    let racers = (0..RACERS).map(|i| {
        let (store, race) = (store.clone(), race.clone());
        async move {
            let body = Bytes::from(i.to_string());
            (i, store.put(&race, body, PutMode::Create).await)
        }
    });
    let results = futures::future::join_all(racers).await;
    let ids = |keep: fn(&Result<crate::store::PutResult, StoreError>) -> bool| -> Vec<usize> {
        results
            .iter()
            .filter(|(_, r)| keep(r))
            .map(|(i, _)| *i)
            .collect()
    };
    let won = ids(|r| r.is_ok());
    // A store that makes racing writes to one key wait for each other (as
    // SeaweedFS does on a versioned bucket) can keep one past the client's
    // timeout: its outcome is unknown, and the object's body tells.
    let timed_out = ids(|r| matches!(r, Err(StoreError::Unavailable(_))));
    let unexpected: Vec<String> = results
        .iter()
        .filter_map(|(_, r)| match r {
            Ok(_)
            | Err(
                StoreError::PreconditionFailed | StoreError::Conflict | StoreError::Unavailable(_),
            ) => None,
            Err(e) => Some(e.to_string()),
        })
        .collect();
    let kept: Option<usize> = again(|| store.get(&race))
        .await
        .ok()
        .and_then(|o| std::str::from_utf8(&o.body).ok()?.parse().ok());
    let holds_winner = match (&won[..], kept) {
        ([w], Some(k)) => *w == k,
        ([], Some(k)) => timed_out.contains(&k),
        _ => false,
    };
    Race {
        won,
        timed_out,
        unexpected,
        holds_winner,
    }
}

/// `If-Match` writes over the current ETag only, and not to a missing key:
/// `(compare_and_swap, what a missing key answered)`.
async fn probe_cas(
    store: &Arc<dyn Store>,
    run: &str,
    findings: &mut Vec<Finding>,
) -> (bool, String) {
    let key = format!("{run}cas");
    let steps = async {
        let a = again(|| store.put(&key, Bytes::from_static(b"a"), PutMode::Overwrite)).await?;
        let b = again(|| {
            store.put(
                &key,
                Bytes::from_static(b"b"),
                PutMode::Update(a.etag.clone()),
            )
        })
        .await;
        let stale = again(|| {
            store.put(
                &key,
                Bytes::from_static(b"c"),
                PutMode::Update(a.etag.clone()),
            )
        })
        .await;
        let now = again(|| store.get(&key)).await?;
        Ok::<_, StoreError>((a.etag, b, stale, now.body))
    };
    let (stale_etag, swap) = match steps.await {
        Ok((etag, b, stale, body)) => {
            let ok =
                b.is_ok() && stale == Err(StoreError::PreconditionFailed) && body[..] == b"b"[..];
            findings.push(finding(
                "compare_and_swap",
                ok,
                match (&b, &stale) {
                    (Err(e), _) => format!("If-Match with the current ETag was refused: {e}"),
                    (_, Ok(_)) => {
                        "If-Match with a stale ETag wrote: the condition is ignored".into()
                    }
                    (_, Err(StoreError::PreconditionFailed)) if ok => {
                        "If-Match writes over the current ETag, and a stale one is a 412".into()
                    }
                    (_, Err(e)) => format!("If-Match with a stale ETag answered {e}"),
                },
            ));
            (etag, ok)
        }
        Err(e) => {
            findings.push(finding(
                "compare_and_swap",
                false,
                format!("If-Match could not be measured: {e}"),
            ));
            return (false, "unmeasured".into());
        }
    };
    let missing_key = format!("{run}cas-missing");
    let missing = again(|| {
        store.put(
            &missing_key,
            Bytes::from_static(b"m"),
            PutMode::Update(stale_etag.clone()),
        )
    })
    .await;
    let (ok, answer) = match &missing {
        Err(StoreError::NotFound) => (true, "404".to_owned()),
        Err(StoreError::PreconditionFailed) => (true, "412".to_owned()),
        Ok(_) => (false, "wrote".to_owned()),
        Err(e) => (false, e.to_string()),
    };
    findings.push(finding(
        "compare_and_swap",
        ok,
        match answer.as_str() {
            "404" => "If-Match on a missing key: 404, as S3".to_owned(),
            "412" => "If-Match on a missing key: 412 (S3 says 404); the protocol treats both alike"
                .to_owned(),
            "wrote" => "If-Match on a missing key wrote it: no compare-and-swap".to_owned(),
            other => format!("If-Match on a missing key answered {other}"),
        },
    ));
    (swap && ok, answer)
}

/// A DELETE with a stale `If-Match` is refused and leaves the object.
async fn probe_delete(store: &Arc<dyn Store>, run: &str, findings: &mut Vec<Finding>) -> bool {
    let key = format!("{run}delete");
    let steps = async {
        let old = again(|| store.put(&key, Bytes::from_static(b"1"), PutMode::Overwrite)).await?;
        again(|| store.put(&key, Bytes::from_static(b"2"), PutMode::Overwrite)).await?;
        let stale: ETag = old.etag;
        let answer = again(|| store.delete(&key, Some(&stale))).await;
        let after = again(|| store.head(&key)).await;
        Ok::<_, StoreError>((answer, after))
    };
    let (ok, detail) = match steps.await {
        Ok((Err(StoreError::PreconditionFailed), Ok(_))) => (
            true,
            "a DELETE with a stale If-Match is a 412 and leaves the object".to_owned(),
        ),
        Ok((Ok(()), Err(StoreError::NotFound))) => (
            false,
            "a DELETE with a stale If-Match deleted the object: If-Match is ignored on DELETE \
             (CONDITIONAL_DELETE=off)"
                .to_owned(),
        ),
        Ok((answer, after)) => (
            false,
            format!(
                "a DELETE with a stale If-Match answered {answer:?}, the object then {:?}",
                after.map(|_| "there")
            ),
        ),
        Err(e) => (false, format!("could not be measured: {e}")),
    };
    findings.push(finding("conditional_delete", ok, detail));
    ok
}

/// Keys that tell orders apart come back in byte order, across pages, and
/// `StartAfter` gives the keys after it in byte order: `(byte order,
/// start_after)`.
async fn probe_listing(
    store: &Arc<dyn Store>,
    run: &str,
    findings: &mut Vec<Finding>,
) -> (bool, bool) {
    let dir = format!("{run}list/");
    let writes = LIST_KEYS.iter().map(|k| {
        let key = format!("{dir}{k}");
        async move { again(|| store.put(&key, Bytes::new(), PutMode::Overwrite)).await }
    });
    if let Some(Err(e)) = futures::future::join_all(writes)
        .await
        .into_iter()
        .find(|r| r.is_err())
    {
        findings.push(finding(
            "byte_order_listing",
            false,
            format!("could not be measured: {e}"),
        ));
        return (false, false);
    }
    let want: Vec<String> = LIST_KEYS.iter().map(|k| format!("{dir}{k}")).collect();

    let (listed, trouble) = walk_listing(store, &dir, &want).await;
    let mut sorted = listed.clone();
    sorted.sort();
    let complete = sorted == want;
    let byte_order = complete && listed == want;
    let names: Vec<&str> = listed.iter().map(|k| &k[dir.len()..]).collect();
    findings.push(finding(
        "byte_order_listing",
        byte_order,
        match (&trouble, complete, byte_order) {
            (Some(e), _, _) => format!("the listing failed: {e}"),
            (None, false, _) => format!("the listing did not give each key once: {names:?}"),
            (None, true, true) => "listed in byte order, a key a page and all in one".to_owned(),
            (None, true, false) => format!("listed in another order: {names:?} (LIST_ORDER=any)"),
        },
    ));

    let start_after = probe_start_after(store, &dir, &want, findings).await;
    probe_folders(store, &dir, findings).await;
    (byte_order, start_after)
}

/// The keys under `dir` as the store walks them: a key a page, then all in
/// one page (SeaweedFS's versioned buckets sort each page, and walk folders
/// first from page to page). The first walk that is not `want` is the one
/// returned; with the error that cut a walk short, if any.
async fn walk_listing(
    store: &Arc<dyn Store>,
    dir: &str,
    want: &[String],
) -> (Vec<String>, Option<String>) {
    let mut listed = Vec::new();
    let mut trouble = None;
    for per_page in [1, 1000] {
        let mut one = Vec::new();
        let mut page = None;
        for _ in 0..LIST_KEYS.len() + 1 {
            match again(|| store.list(dir, None, page.clone(), per_page)).await {
                Ok(p) => {
                    one.extend(p.objects.into_iter().map(|o| o.key));
                    match p.next {
                        Some(n) => page = Some(n),
                        None => break,
                    }
                }
                Err(e) => {
                    trouble = Some(e.to_string());
                    break;
                }
            }
        }
        // The first listing that is not in byte order is the one reported.
        if listed.is_empty() || listed == want {
            listed = one;
        }
    }
    (listed, trouble)
}

/// `StartAfter`, as the byte-order pass lists by it. After `a-b/1`: byte
/// order has seven keys after it, a folders-first order six (`a/1` comes
/// before `a-b/1` there).
async fn probe_start_after(
    store: &Arc<dyn Store>,
    dir: &str,
    want: &[String],
    findings: &mut Vec<Finding>,
) -> bool {
    let after = format!("{dir}a-b/1");
    match again(|| store.list(dir, Some(&after), None, 100)).await {
        Ok(p) => {
            let got: Vec<String> = p.objects.into_iter().map(|o| o.key).collect();
            let ok = got == want[1..];
            let names: Vec<&str> = got.iter().map(|k| &k[dir.len()..]).collect();
            findings.push(finding(
                "start_after",
                ok,
                if ok {
                    "StartAfter gives the keys after it in byte order".to_owned()
                } else {
                    format!("StartAfter a-b/1 gave {names:?}, not the keys after it in byte order (LIST_ORDER=any)")
                },
            ));
            ok
        }
        Err(e) => {
            findings.push(finding(
                "start_after",
                false,
                format!("StartAfter is refused: {e} (LIST_ORDER=any)"),
            ));
            false
        }
    }
}

/// What LIST_ORDER=any lists by: the folders right under a prefix.
async fn probe_folders(store: &Arc<dyn Store>, dir: &str, findings: &mut Vec<Finding>) {
    let dirs = again(|| store.list_dirs(dir, None)).await;
    let mut got = dirs
        .as_ref()
        .map(|d| d.prefixes.clone())
        .unwrap_or_default();
    got.sort();
    let want_dirs: Vec<String> = ["a-b/", "a.b/", "a/", "b/", "d/"]
        .iter()
        .map(|d| format!("{dir}{d}"))
        .collect();
    findings.push(finding(
        "folders",
        got == want_dirs,
        match &dirs {
            Ok(_) if got == want_dirs => {
                "Delimiter: / gives the folders under a prefix (what LIST_ORDER=any lists by)"
                    .to_owned()
            }
            Ok(_) => format!("Delimiter: / gave {got:?}"),
            Err(e) => format!("Delimiter: / is refused: {e}"),
        },
    ));
}

/// Removes every version of every object under `run` (on an unversioned
/// bucket, every object); the keys still there after it.
async fn clean_up(store: &Arc<dyn Store>, run: &str) -> Vec<String> {
    for _ in 0..3 {
        let versions = again(|| store.list_versions(run)).await.unwrap_or_default();
        for (key, version) in &versions {
            let _ = again(|| store.delete_version(key, version)).await;
        }
        // A store without versions: its objects, plainly.
        if let Ok(listed) = again(|| store.list(run, None, None, 1000)).await {
            for o in &listed.objects {
                let _ = again(|| store.delete(&o.key, None)).await;
            }
        }
        if left_behind(store, run).await.is_empty() {
            break;
        }
    }
    left_behind(store, run).await
}

/// Keys (or versions) under `run` still in the store.
async fn left_behind(store: &Arc<dyn Store>, run: &str) -> Vec<String> {
    let mut left: Vec<String> = again(|| store.list(run, None, None, 1000))
        .await
        .map(|p| p.objects.into_iter().map(|o| o.key).collect())
        .unwrap_or_else(|e| vec![format!("(cannot list: {e})")]);
    if let Ok(versions) = again(|| store.list_versions(run)).await {
        left.extend(
            versions
                .into_iter()
                .map(|(k, v)| format!("{k}?versionId={v}")),
        );
    }
    left.sort();
    left.dedup();
    left
}
/// Whether the store can host the service with the process's settings:
/// it can (atomic create-only PUTs, compare-and-swap), and the settings it
/// needs are set.
pub fn probe_healthy(found: &ProbeReport, mismatches: &[String]) -> bool {
    found.can_host && mismatches.is_empty()
}

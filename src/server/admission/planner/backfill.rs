//! Backfill: cards kept for the job at the head of the queue, so that a later job starts early
//! only where it cannot delay it.
//!
//! When the first waiting job of a priority level (its *head*) does not fit, the pass works out
//! the earliest moment it could start, and on which cards, if every job holding cards ran to its
//! deadline (container start plus timeout: the latest it can end, since a timeout is enforced)
//! plus the slack of a stop and a release. Those cards are kept for the head from that moment. A
//! later job may still take a kept card now if its own timeout (plus the slack) ends it before
//! that moment, or if what it takes leaves the head's need free then ("beside" the head); any
//! other waits with [`WaitReason::ReservedForHead`]. Jobs ending early only bring that moment
//! forward, so the head starts by the first moment it was given, barring jobs of a higher
//! priority submitted later, cards lost or drained, foreign memory, and edits of the manifest.
//!
//! One head per priority level: the first job of the level that waits and can be given a moment
//! (one that never fits on the cards that take work, or waits only behind jobs without a known
//! end, gives its turn to the next). Heads never share a card: a later head is placed on the cards
//! no earlier head keeps. A head past the starvation limit keeps its hold as well.

use std::collections::{BTreeMap, HashMap};

use serde::{Deserialize, Serialize};
use uuid::Uuid;

use super::{least, CardGrant, Pass, Placement, PlanInput, Shape, Slot, WaitReason};

/// What backfill needs beyond the rest of a pass's input. `PlanInput::backfill` `None`: no
/// backfill (the launch policy's `backfill: false`), later jobs take any card they fit on.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Backfill {
    /// The jobs holding cards and when they give them back at the latest. A card's reservations
    /// that no release covers are taken to stay forever.
    pub releases: Vec<Release>,
    /// Each queued job's run-time bound, ms: its timeout. A job missing here is taken to run
    /// forever, so it only ever starts beside a head.
    pub bounds: BTreeMap<Uuid, i64>,
    /// Added to every deadline and bound: the stop's grace, the release by the next pass and the
    /// next launch.
    pub slack_ms: i64,
}

/// A job holding cards, and when it ends at the latest.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Release {
    /// The job.
    pub job_id: Uuid,
    /// Its deadline, ms (its container's start plus its timeout); the slack is added to it.
    pub deadline_ms: i64,
    /// What it holds, card by card.
    pub grants: Vec<CardGrant>,
    /// It holds its cards whole.
    pub exclusive: bool,
}

/// Cards kept for a head from the moment it can start.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Reservation {
    /// The head.
    pub head: Uuid,
    /// When it can start at the latest, ms, as things stand.
    pub start_ms: i64,
    /// What it will take on each kept card then (its need; all free memory if exclusive), in
    /// card-index order.
    pub cards: Vec<CardGrant>,
}

/// A card kept for a head.
#[derive(Debug, Clone)]
struct Kept {
    head: Uuid,
    start_ms: i64,
    /// What jobs still running at `start_ms` may yet take there; `None`: nothing (an exclusive
    /// head, or an exclusive job took it).
    spare: Option<i64>,
}

/// One card's future, as far as backfill sees it.
#[derive(Debug, Clone, Default)]
struct Future {
    /// Reserved now, this pass's grants included.
    reserved: i64,
    /// (when, MiB, exclusive) given back, the slack included.
    releases: Vec<(i64, i64, bool)>,
    kept: Option<Kept>,
}

/// The pass's backfill state, by slot.
pub(super) struct Book<'a> {
    cards: Vec<Future>,
    bounds: &'a BTreeMap<Uuid, i64>,
    slack_ms: i64,
    now_ms: i64,
    /// Priority levels whose head has its cards.
    levels: Vec<i32>,
}

/// A head's place at its earliest start: (slot, grant, spare) per card.
type Fit = Vec<(usize, i64, Option<i64>)>;

impl<'a> Book<'a> {
    /// The book of a pass over `slots`; `None` without backfill.
    pub(super) fn new(input: &'a PlanInput, slots: &[Slot]) -> Option<Book<'a>> {
        let bf = input.backfill.as_ref()?;
        let by_uuid: HashMap<Uuid, usize> = slots
            .iter()
            .enumerate()
            .map(|(si, s)| (input.cards[s.src].uuid, si))
            .collect();
        let mut cards: Vec<Future> = slots
            .iter()
            .map(|s| Future {
                reserved: input.cards[s.src].reserved_mib.max(0),
                ..Future::default()
            })
            .collect();
        for r in &bf.releases {
            let at = r.deadline_ms.saturating_add(bf.slack_ms);
            for g in &r.grants {
                if let Some(&si) = by_uuid.get(&g.uuid) {
                    cards[si]
                        .releases
                        .push((at, g.vram_mib.max(0), r.exclusive));
                }
            }
        }
        Some(Book {
            cards,
            bounds: &bf.bounds,
            slack_ms: bf.slack_ms,
            now_ms: input.now_ms,
            levels: Vec::new(),
        })
    }

    /// When job `id`, started now, has given its cards back at the latest; `None`: unbounded.
    pub(super) fn ends_by(&self, id: Uuid) -> Option<i64> {
        let bound = self.bounds.get(&id)?;
        Some(
            self.now_ms
                .saturating_add((*bound).max(0))
                .saturating_add(self.slack_ms),
        )
    }

    /// Whether a job of shape `s` may take `need` on slot `si` without delaying its head.
    pub(super) fn allows(&self, si: usize, s: &Shape, need: i64) -> bool {
        match &self.cards[si].kept {
            None => true,
            Some(k) => {
                s.ends_by.is_some_and(|e| e <= k.start_ms)
                    || (!s.exclusive && k.spare.is_some_and(|spare| need <= spare))
            }
        }
    }

    /// The kept card that refuses a job of shape `s` on slot `si`, if one does.
    fn refusing(&self, si: usize, s: &Shape, need: i64) -> Option<&Kept> {
        let k = self.cards[si].kept.as_ref()?;
        (!self.allows(si, s, need)).then_some(k)
    }
}

impl Pass<'_> {
    /// Records an admitted job's grants: they are reserved now and given back by its bound, and
    /// those that run past a head's start use up what is spare beside it.
    pub(super) fn backfilled(&mut self, s: &Shape, placement: &Placement) {
        let Some(book) = self.bf.as_mut() else {
            return;
        };
        for (&si, g) in self.pick.iter().zip(&placement.cards) {
            let card = &mut book.cards[si];
            card.reserved = card.reserved.saturating_add(g.vram_mib);
            if let Some(e) = s.ends_by {
                card.releases.push((e, g.vram_mib, s.exclusive));
            }
            if let Some(k) = &mut card.kept {
                if s.ends_by.is_none_or(|e| e > k.start_ms) {
                    k.spare = match (s.exclusive, k.spare) {
                        (false, Some(spare)) => Some(spare - g.vram_mib),
                        _ => None,
                    };
                }
            }
        }
    }

    /// Keeps cards for `head` (of shape `s`, at `priority`) if it is the first of its level to
    /// wait and some moment can be found for it.
    pub(super) fn reserve(
        &mut self,
        s: &mut Shape,
        head: Uuid,
        priority: i32,
    ) -> Option<Reservation> {
        let book = self.bf.as_ref()?;
        if s.unreservable || book.levels.contains(&priority) {
            return None;
        }
        let Some((start_ms, fit)) = self.earliest(book, s, head) else {
            // Capacity only shrinks within a pass: the shape finds no moment later on either.
            s.unreservable = true;
            return None;
        };
        let mut cards = Vec::with_capacity(fit.len());
        let book = self.bf.as_mut()?;
        for &(si, grant, spare) in &fit {
            book.cards[si].kept = Some(Kept {
                head,
                start_ms,
                spare,
            });
            cards.push(CardGrant {
                uuid: self.input.cards[self.slots[si].src].uuid,
                vram_mib: grant,
            });
        }
        book.levels.push(priority);
        self.gen += 1;
        Some(Reservation {
            head,
            start_ms,
            cards,
        })
    }

    /// The earliest moment a head of shape `s` fits as the cards' holders give them back, and
    /// where (best fit at that moment, as a pass then would place it).
    fn earliest(&self, book: &Book<'_>, s: &Shape, head: Uuid) -> Option<(i64, Fit)> {
        s.min_need?;
        let usable: Vec<bool> = self
            .slots
            .iter()
            .enumerate()
            .map(|(si, c)| {
                c.online
                    && s.needs[c.model] >= 0
                    && s.allows(c.node)
                    && c.blocked_by.is_none_or(|b| b == head)
                    && book.cards[si].kept.is_none()
            })
            .collect();
        let mut events: Vec<(i64, usize, i64, bool)> = Vec::new();
        for (si, card) in book.cards.iter().enumerate() {
            if usable[si] {
                for &(at, mib, excl) in &card.releases {
                    events.push((at.max(book.now_ms), si, mib, excl));
                }
            }
        }
        events.sort_unstable_by_key(|e| (e.0, e.1));
        let mut released = vec![0i64; self.slots.len()];
        let mut unheld = vec![false; self.slots.len()];
        let mut i = 0;
        while i < events.len() {
            let t = events[i].0;
            while let Some(&(_, si, mib, excl)) = events.get(i).filter(|e| e.0 == t) {
                released[si] = released[si].saturating_add(mib);
                unheld[si] |= excl;
                i += 1;
            }
            let at = |si: usize| {
                let c = &self.slots[si];
                let reserved = book.cards[si].reserved.saturating_sub(released[si]).max(0);
                let held = c.held && !unheld[si];
                (
                    c.cap_empty.saturating_sub(reserved).max(0),
                    reserved > 0,
                    held,
                )
            };
            if let Some(fit) = self.fit_at(s, &usable, at) {
                return Some((t, fit));
            }
        }
        None
    }

    /// Best fit for shape `s` on the usable slots, each slot's (free, busy, held) given by `at`.
    fn fit_at(
        &self,
        s: &Shape,
        usable: &[bool],
        at: impl Fn(usize) -> (i64, bool, bool),
    ) -> Option<Fit> {
        let g = s.gpu_count;
        let mut best: Option<(i64, Fit)> = None;
        let mut buf: Vec<(i64, usize)> = Vec::new();
        let mut free = HashMap::new();
        for (n, span) in self.nodes.iter().enumerate() {
            if span.end - span.start < g || !s.allows(n) {
                continue;
            }
            buf.clear();
            for (si, _) in usable
                .iter()
                .enumerate()
                .take(span.end)
                .skip(span.start)
                .filter(|(_, u)| **u)
            {
                let need = s.needs[self.slots[si].model];
                let (f, busy, held) = at(si);
                if !held && f >= need && !(s.exclusive && busy) {
                    buf.push((f - need, si));
                    free.insert(si, f);
                }
            }
            let Some((cost, chosen)) = least(&mut buf, g) else {
                continue;
            };
            if best.as_ref().is_none_or(|(b, _)| cost < *b) {
                let mut fit: Fit = chosen
                    .iter()
                    .map(|&(_, si)| {
                        let f = free.get(&si).copied().unwrap_or(0);
                        let need = s.needs[self.slots[si].model];
                        if s.exclusive {
                            (si, f, None)
                        } else {
                            (si, need, Some(f - need))
                        }
                    })
                    .collect();
                fit.sort_unstable_by_key(|e| e.0);
                best = Some((cost, fit));
            }
        }
        best.map(|(_, fit)| fit)
    }

    /// Why shape `s`, which did not fit, waits, if kept cards are the cause: it would fit
    /// without them.
    pub(super) fn kept_reason(&mut self, s: &Shape) -> Option<WaitReason> {
        if self.bf.as_ref()?.levels.is_empty() || !self.try_place(s, false) {
            return None;
        }
        let book = self.bf.as_ref()?;
        let kept = self
            .pick
            .iter()
            .filter_map(|&si| book.refusing(si, s, s.needs[self.slots[si].model]))
            .min_by_key(|k| k.start_ms)?;
        Some(WaitReason::ReservedForHead {
            head: kept.head,
            start_by_ms: kept.start_ms,
            max_timeout_ms: kept.start_ms - book.now_ms - book.slack_ms,
        })
    }
}

#[cfg(test)]
mod tests;

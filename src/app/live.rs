//! Live updates: one EventSource on `/api/v1/events`; every event moves a counter that page
//! resources depend on, so they refetch in place. EventSource reconnects by itself after a drop
//! (and is reopened if the browser gives up on it); a reconnect also moves the counter (something
//! may have happened meanwhile), and while the stream is down pages refetch every few seconds.

use leptos::prelude::*;

/// A counter that moves whenever jobs or cards changed anywhere.
#[derive(Clone, Copy)]
pub struct Live(pub RwSignal<u64>);

/// Provides [`Live`] and, in the browser, connects it to the event stream once `signed_in` is true
/// (the stream is for signed-in users only).
pub fn provide_live(signed_in: Signal<bool>) -> Live {
    let live = Live(RwSignal::new(0));
    provide_context(live);
    let connected = StoredValue::new(false);
    Effect::new(move |_| {
        if signed_in.get() && !connected.get_value() {
            connected.set_value(true);
            connect(live.0);
        }
    });
    live
}

/// The counter a page's resources depend on: it moves with every live event, and once more when
/// the page has hydrated after the stream moved the counter already.
///
/// The stream may open before a page's code runs: a route's code loads lazily, after the app's,
/// and the stream's "refetch on open" then reached no resource of the page. The page kept the
/// server-rendered data, and a job that ended between that render and the stream's opening sent
/// no event after it: the page showed `starting` until it was reloaded (the browser test of pages
/// opened while a job moves failed 8 runs in 22). So each page refetches once it is live, unless
/// nothing has happened since the app started.
pub fn use_live() -> Signal<u64> {
    let stream = use_context::<Live>()
        .map(|l| l.0)
        .unwrap_or_else(|| RwSignal::new(0));
    let caught_up = RwSignal::new(0u64);
    // Effects run in the browser only, once the page is hydrated.
    Effect::new(move |_| {
        if stream.get_untracked() > 0 {
            caught_up.set(1);
        }
    });
    Signal::derive(move || stream.get() + caught_up.get())
}

/// How often pages refetch while the stream is down (so they stay true even when a proxy or a
/// flaky network keeps the stream from coming back), and how soon a closed stream is reopened.
#[cfg(feature = "hydrate")]
const FALLBACK_POLL: std::time::Duration = std::time::Duration::from_secs(3);

#[cfg(feature = "hydrate")]
fn connect(tick: RwSignal<u64>) {
    use std::cell::Cell;
    use std::rc::Rc;
    use wasm_bindgen::closure::Closure;
    use wasm_bindgen::JsCast;

    let up = Rc::new(Cell::new(false));
    open(tick, Rc::clone(&up));
    // While the stream is down, refetch now and then: a fetch that failed meanwhile is retried.
    {
        let up = Rc::clone(&up);
        let _ = set_interval_with_handle(
            move || {
                if !up.get() {
                    tick.update(|n| *n += 1);
                }
            },
            FALLBACK_POLL,
        );
    }
    // Back online: refetch at once.
    let online = Closure::<dyn FnMut(web_sys::Event)>::new(move |_: web_sys::Event| {
        tick.update(|n| *n += 1);
    });
    let _ = window().add_event_listener_with_callback("online", online.as_ref().unchecked_ref());
    online.forget();

    /// One EventSource; it reconnects by itself after a network error, and when the browser
    /// gives up on it (closed), a new one is opened after [`FALLBACK_POLL`].
    fn open(tick: RwSignal<u64>, up: Rc<Cell<bool>>) {
        let Ok(source) = web_sys::EventSource::new("/api/v1/events") else {
            return;
        };
        let bump = Closure::<dyn FnMut(web_sys::Event)>::new(move |_: web_sys::Event| {
            tick.update(|n| *n += 1);
        });
        for kind in ["job", "queue", "pass", "cards", "changed", "resync"] {
            let _ = source.add_event_listener_with_callback(kind, bump.as_ref().unchecked_ref());
        }
        // Something may have happened while the stream was down: refetch on every (re)open.
        let opened = {
            let up = Rc::clone(&up);
            Closure::<dyn FnMut(web_sys::Event)>::new(move |_: web_sys::Event| {
                up.set(true);
                tick.update(|n| *n += 1);
            })
        };
        let _ = source.add_event_listener_with_callback("open", opened.as_ref().unchecked_ref());
        let failed = {
            let source = source.clone();
            Closure::<dyn FnMut(web_sys::Event)>::new(move |_: web_sys::Event| {
                up.set(false);
                if source.ready_state() == web_sys::EventSource::CLOSED {
                    let up = Rc::clone(&up);
                    set_timeout(move || open(tick, up), FALLBACK_POLL);
                }
            })
        };
        let _ = source.add_event_listener_with_callback("error", failed.as_ref().unchecked_ref());
        // The listeners live as long as the page.
        bump.forget();
        opened.forget();
        failed.forget();
    }
}

#[cfg(not(feature = "hydrate"))]
fn connect(_tick: RwSignal<u64>) {}

//! Live updates: one EventSource on `/api/v1/events`; every event moves a counter that page
//! resources depend on, so they refetch in place. EventSource reconnects by itself after a drop,
//! and a reconnect also moves the counter (something may have happened meanwhile).

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

/// The counter to depend on.
pub fn use_live() -> RwSignal<u64> {
    use_context::<Live>()
        .map(|l| l.0)
        .unwrap_or_else(|| RwSignal::new(0))
}

#[cfg(feature = "hydrate")]
fn connect(tick: RwSignal<u64>) {
    use wasm_bindgen::closure::Closure;
    use wasm_bindgen::JsCast;
    let Ok(source) = web_sys::EventSource::new("/api/v1/events") else {
        return;
    };
    let bump = Closure::<dyn FnMut(web_sys::Event)>::new(move |_: web_sys::Event| {
        tick.update(|n| *n += 1);
    });
    for kind in ["job", "pass", "cards", "changed", "resync", "open"] {
        let _ = source.add_event_listener_with_callback(kind, bump.as_ref().unchecked_ref());
    }
    // The listeners live as long as the page.
    bump.forget();
}

#[cfg(not(feature = "hydrate"))]
fn connect(_tick: RwSignal<u64>) {}

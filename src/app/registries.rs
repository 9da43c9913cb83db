//! The admin page's registry credentials: the hosts with stored credentials (host, username, when
//! and by whom), a form to add or replace one, and a button to remove one. A password is sent,
//! never shown back: the server has no function that returns one.

use super::alert::{action_error, loaded, Fetched};
use super::widgets::table_or_note;
use crate::api::{RemoveRegistry, SetRegistry};
use crate::model::RegistryView;
use leptos::prelude::*;

/// The section, with its actions and list (made by the page, once per page).
#[component]
pub fn Registries(
    set: ServerAction<SetRegistry>,
    remove: ServerAction<RemoveRegistry>,
    registries: Fetched<Vec<RegistryView>>,
) -> impl IntoView {
    let saved = move || {
        set.value().get().and_then(|r| r.ok()).map(|v| {
            view! { <p role="status">{format!("Credentials for {} saved (user {}).", v.host, v.username)}</p> }
        })
    };
    view! {
        <section class="card">
            <h2>"Registry credentials"</h2>
            <p class="muted">"What the nodes hand a registry when they pull an image from it. Passwords are stored encrypted under the server's secrets key and never shown again; members use them only by running an image the launch policy allows."</p>
            {move || action_error(remove.value().get())}
            {loaded(registries, move |list| table_or_note("registries", ["Registry", "User", "Set", ""], list, move |r| {
                let host = r.host.clone();
                view! {
                    <tr data-registry=r.host.clone()>
                        <td><code>{r.host.clone()}</code></td>
                        <td>{r.username.clone()}</td>
                        <td>{format!("{} by {}", r.set_at.format("%Y-%m-%d %H:%M"), r.set_by)}</td>
                        <td>
                            <button type="button" class="small danger" on:click=move |_| {
                                remove.dispatch(RemoveRegistry { host: host.clone() });
                            }>"Remove"</button>
                        </td>
                    </tr>
                }
            }, "No registry has credentials: images are pulled without any."))}
            <h3>"Add or replace"</h3>
            <ActionForm action=set attr:id="new-registry" attr:class="row">
                <div class="field">
                    <label for="registry-host">"Registry"</label>
                    <input id="registry-host" name="host" type="text" required autocomplete="off" placeholder="registry.example.com:5000" />
                </div>
                <div class="field">
                    <label for="registry-username">"User"</label>
                    <input id="registry-username" name="username" type="text" required autocomplete="off" />
                </div>
                <div class="field">
                    <label for="registry-password">"Password or token"</label>
                    <input id="registry-password" name="password" type="password" required autocomplete="new-password" />
                </div>
                <div class="field"><button type="submit">"Save"</button></div>
            </ActionForm>
            {move || action_error(set.value().get())}
            {saved}
        </section>
    }
}

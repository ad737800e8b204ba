//! The web view's HTML, rendered here from the fleet document (`page.html` holds the frame,
//! the style, the element ids and the little script that reloads the body).

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write;

use super::fleet::{AppDoc, FleetDoc, LinkDoc, NodeDoc};

const FRAME: &str = include_str!("page.html");

/// The whole page.
pub fn page(doc: Option<&FleetDoc>) -> String {
    FRAME.replace("{{BODY}}", &body(doc))
}

/// Text made safe inside HTML elements and attributes.
fn esc(s: &str) -> String {
    let mut o = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => o.push_str("&amp;"),
            '<' => o.push_str("&lt;"),
            '>' => o.push_str("&gt;"),
            '"' => o.push_str("&quot;"),
            '\'' => o.push_str("&#39;"),
            c => o.push(c),
        }
    }
    o
}

fn ms(v: Option<f64>) -> String {
    v.map_or("–".into(), |v| format!("{v:.1} ms"))
}

fn pct(v: Option<f64>) -> String {
    v.map_or("–".into(), |v| format!("{:.2} %", v * 100.0))
}

/// A node a large fleet's page draws a card for: not online, or running containers.
fn noteworthy(n: &NodeDoc) -> bool {
    n.state != "online" || n.containers > 0
}

fn share(used: u64, cap: u64) -> f64 {
    if cap == 0 {
        0.0
    } else {
        (used as f64 / cap as f64).clamp(0.0, 1.0)
    }
}

/// The body (what `/fragment` serves and the page reloads).
pub fn body(doc: Option<&FleetDoc>) -> String {
    let Some(d) = doc else {
        return "<section id=\"summary\"><p class=\"muted\">waiting for the first view of the \
                fleet…</p></section><section id=\"fleet\"></section><section id=\"apps\">\
                </section><section id=\"links\"></section><section id=\"events\"></section>"
            .into();
    };
    let mut o = String::new();
    summary(&mut o, d);
    apps(&mut o, d);
    fleet(&mut o, d);
    events(&mut o, d);
    links(&mut o, d);
    o
}

/// How many of `nodes` are in each state: "3 online, 1 unreachable" (states by name).
fn by_state<'a>(nodes: impl IntoIterator<Item = &'a NodeDoc>) -> String {
    let mut states: BTreeMap<&str, usize> = BTreeMap::new();
    for n in nodes {
        *states.entry(n.state).or_default() += 1;
    }
    let states: Vec<String> = states.iter().map(|(s, n)| format!("{n} {s}")).collect();
    states.join(", ")
}

fn summary(o: &mut String, d: &FleetDoc) {
    let states = by_state(d.datacenters.iter().flat_map(|dc| &dc.nodes));
    let c = &d.counters;
    let _ = write!(
        o,
        "<section id=\"summary\"><b>{} nodes</b> ({}) in {} datacenters · <b>{} applications</b> · \
         {} reports, {} link reports, {} container reports ingested · {} placement jobs · \
         {} desired states published · {} commit collisions</section>",
        d.node_names.len(),
        esc(&states),
        d.datacenters.len(),
        d.apps.len(),
        c.reports,
        c.links,
        c.actuals,
        c.jobs,
        c.desired_published,
        c.collisions
    );
}

/// The link matrix is drawn for at most this many nodes (a row and a column each); a larger
/// fleet's links are listed instead, those the document holds.
pub const MATRIX_NODES_MAX: usize = 64;

/// Every node gets a card in a fleet of at most this many; in a larger one a datacenter says
/// how many of its nodes are in each state, and cards are drawn for the nodes that are not
/// online or run containers, at most this many in all.
pub const NODE_CARDS_MAX: usize = 500;

fn fleet(o: &mut String, d: &FleetDoc) {
    o.push_str("<section id=\"fleet\"><h2>Fleet by datacenter</h2>");
    let total: usize = d.datacenters.iter().map(|dc| dc.nodes.len()).sum();
    let every_card = total <= NODE_CARDS_MAX;
    let mut cards_left = NODE_CARDS_MAX;
    if !every_card {
        let noted = d
            .datacenters
            .iter()
            .flat_map(|dc| &dc.nodes)
            .filter(|n| noteworthy(n))
            .count();
        let _ = write!(
            o,
            "<p class=\"muted\">{total} nodes: a card for each node not online or running \
             containers ({noted}{}), the rest counted by state</p>",
            if noted > NODE_CARDS_MAX {
                format!(", the first {NODE_CARDS_MAX} drawn")
            } else {
                String::new()
            }
        );
    }
    o.push_str("<div class=\"dcs\">");
    for dc in &d.datacenters {
        let _ = write!(
            o,
            "<div class=\"dc\" data-dc=\"{0}\"><h3>{0}</h3>",
            esc(&dc.name)
        );
        if !every_card {
            let _ = write!(
                o,
                "<span class=\"muted\">{}</span>",
                esc(&by_state(&dc.nodes))
            );
        }
        o.push_str("<div class=\"nodes\">");
        for n in &dc.nodes {
            if !every_card {
                if !noteworthy(n) || cards_left == 0 {
                    continue;
                }
                cards_left -= 1;
            }
            let cpu = share(n.cpu_millis, n.cpu_capacity_millis);
            let mem = share(n.memory_mb, n.memory_capacity_mb);
            let _ = write!(
                o,
                "<div class=\"node state-{s}\" data-node=\"{name}\"><b>{name}</b> \
                 <span class=\"badge b-{s}\">{s}</span><br>\
                 <span class=\"muted\">{layer} · {arch} · {k} containers</span><br>\
                 cpu {cpu_m}/{cpu_c} m<div class=\"bar\"><i style=\"width:{cpu_w:.0}%\"></i></div>\
                 mem {mem_m}/{mem_c} MB<div class=\"bar\"><i style=\"width:{mem_w:.0}%\"></i></div>\
                 </div>",
                s = esc(n.state),
                name = esc(&n.name),
                layer = esc(&n.layer),
                arch = esc(&n.arch),
                k = n.containers,
                cpu_m = n.cpu_millis,
                cpu_c = n.cpu_capacity_millis,
                cpu_w = cpu * 100.0,
                mem_m = n.memory_mb,
                mem_c = n.memory_capacity_mb,
                mem_w = mem * 100.0,
            );
        }
        o.push_str("</div></div>");
    }
    o.push_str("</div></section>");
}

fn apps(o: &mut String, d: &FleetDoc) {
    o.push_str("<section id=\"apps\"><h2>Applications</h2>");
    if d.apps.is_empty() {
        o.push_str("<p class=\"muted\">no application yet</p>");
    }
    for (i, a) in d.apps.iter().enumerate() {
        let score = match (a.score, a.score_now) {
            (Some(s), Some(n)) => format!("score {s:.3} (now {n:.3})"),
            (Some(s), None) => format!("score {s:.3}"),
            _ => String::new(),
        };
        let _ = write!(
            o,
            "<div class=\"app\" data-app=\"{name}\"><h3>{name} <span class=\"badge b-{st}\">{st}\
             </span> <span class=\"muted\">{sched} · {score}</span></h3>",
            name = esc(&a.name),
            st = esc(&a.state),
            sched = esc(&a.scheduler),
            score = esc(&score),
        );
        if let Some(r) = &a.reason {
            let _ = write!(o, "<p class=\"muted\">{}</p>", esc(r));
        }
        drawing(o, a, i);
        paths(o, a);
        o.push_str("</div>");
    }
    o.push_str("</section>");
}

const COL_W: f64 = 230.0;
const BOX_W: f64 = 130.0;
const BOX_H: f64 = 26.0;
const ROW_H: f64 = 44.0;
const TOP: f64 = 28.0;

/// The components drawn on the nodes that run them (one column per node), the channels as
/// arrows labelled with their links' measured latency.
fn drawing(o: &mut String, a: &AppDoc, i: usize) {
    let mut cols: Vec<String> = vec![];
    let mut at: HashMap<&str, (f64, f64)> = HashMap::new();
    let mut rows: Vec<usize> = vec![];
    for c in &a.components {
        let col_name = c.node.clone().unwrap_or_else(|| "(not placed)".into());
        let col = match cols.iter().position(|x| *x == col_name) {
            Some(i) => i,
            None => {
                cols.push(col_name);
                rows.push(0);
                cols.len() - 1
            }
        };
        let x = 10.0 + col as f64 * COL_W;
        let y = TOP + rows[col] as f64 * ROW_H;
        rows[col] += 1;
        at.insert(c.name.as_str(), (x, y));
    }
    let height = TOP + rows.iter().copied().max().unwrap_or(1) as f64 * ROW_H;
    let width = 20.0 + cols.len().max(1) as f64 * COL_W;
    let _ = write!(
        o,
        "<svg width=\"{width:.0}\" height=\"{height:.0}\" role=\"img\" aria-label=\"components of \
         {}\"><defs><marker id=\"arrow{i}\" viewBox=\"0 0 10 10\" refX=\"10\" refY=\"5\" \
         markerWidth=\"6\" markerHeight=\"6\" orient=\"auto\"><path d=\"M0,0L10,5L0,10z\" \
         fill=\"#667\"/></marker></defs>",
        esc(&a.name)
    );
    for (k, n) in cols.iter().enumerate() {
        let x = 10.0 + k as f64 * COL_W;
        let _ = write!(
            o,
            "<rect x=\"{:.0}\" y=\"4\" width=\"{:.0}\" height=\"{:.0}\" rx=\"6\" fill=\"#eef1f7\"/>\
             <text x=\"{:.0}\" y=\"18\" font-weight=\"bold\">{}</text>",
            x - 6.0,
            BOX_W + 12.0,
            height - 8.0,
            x,
            esc(n)
        );
    }
    for ch in &a.channels {
        let (Some(&(x1, y1)), Some(&(x2, y2))) = (at.get(ch.from.as_str()), at.get(ch.to.as_str()))
        else {
            continue;
        };
        let (ax, ay) = (x1 + BOX_W / 2.0, y1 + BOX_H / 2.0);
        let (bx, by) = (x2 + BOX_W / 2.0, y2 + BOX_H / 2.0);
        // from the edge of one box to the edge of the other
        let (sx, sy, ex, ey) = if (x1 - x2).abs() < 1.0 {
            let dir = if by > ay { 1.0 } else { -1.0 };
            (ax, ay + dir * BOX_H / 2.0, bx, by - dir * BOX_H / 2.0)
        } else {
            let dir = if bx > ax { 1.0 } else { -1.0 };
            (ax + dir * BOX_W / 2.0, ay, bx - dir * BOX_W / 2.0, by)
        };
        let _ = write!(
            o,
            "<line x1=\"{sx:.0}\" y1=\"{sy:.0}\" x2=\"{ex:.0}\" y2=\"{ey:.0}\" stroke=\"#667\" \
             marker-end=\"url(#arrow{i})\"><title>{}</title></line>",
            esc(&ch.name)
        );
        if let Some(l) = ch.latency_ms {
            let _ = write!(
                o,
                "<text x=\"{:.0}\" y=\"{:.0}\" fill=\"#445\">{l:.1} ms</text>",
                (sx + ex) / 2.0 + 3.0,
                (sy + ey) / 2.0 - 3.0
            );
        }
    }
    for c in &a.components {
        let (x, y) = at[c.name.as_str()];
        let fill = match c.state.as_str() {
            "running" => "#c9f0d3",
            "pending" | "unknown" => "#fbe7b5",
            _ => "#f8c9c9",
        };
        let _ = write!(
            o,
            "<g class=\"comp\" data-component=\"{n}\" data-node=\"{node}\"><rect x=\"{x:.0}\" \
             y=\"{y:.0}\" width=\"{BOX_W:.0}\" height=\"{BOX_H:.0}\" rx=\"4\" fill=\"{fill}\" \
             stroke=\"#889\"/><text x=\"{tx:.0}\" y=\"{ty:.0}\">{n}</text><title>{n}: {st}</title></g>",
            n = esc(&c.name),
            node = esc(c.node.as_deref().unwrap_or("")),
            tx = x + 6.0,
            ty = y + 17.0,
            st = esc(&c.state),
        );
    }
    o.push_str("</svg>");
}

fn paths(o: &mut String, a: &AppDoc) {
    if a.paths.is_empty() {
        return;
    }
    o.push_str(
        "<table><tr><th class=\"l\">path</th><th class=\"l\">channels</th><th>latency</th>\
         <th>optimum</th><th>reliability</th><th>optimum</th></tr>",
    );
    for p in &a.paths {
        let worse = |v: Option<f64>, opt: Option<f64>, lower_better: bool| match (v, opt) {
            (Some(v), Some(o))
                if (lower_better && v > o * 1.001) || (!lower_better && v < o * 0.999) =>
            {
                " class=\"worse\""
            }
            _ => "",
        };
        let _ = write!(
            o,
            "<tr class=\"path\" data-path=\"{}\"><td class=\"l\">{}</td><td class=\"l\">{}</td>\
             <td{}>{}</td><td>{}</td><td{}>{}</td><td>{}</td></tr>",
            esc(&p.name),
            esc(&p.name),
            esc(&p.channels.join(", ")),
            worse(p.latency_ms, p.latency_optimum_ms, true),
            ms(p.latency_ms),
            ms(p.latency_optimum_ms),
            worse(p.reliability, p.reliability_optimum, false),
            pct(p.reliability),
            pct(p.reliability_optimum),
        );
    }
    o.push_str("</table>");
}

fn links(o: &mut String, d: &FleetDoc) {
    o.push_str("<section id=\"links\"><h2>Measured links</h2>");
    if d.links.is_empty() {
        if d.links_measured == 0 {
            o.push_str("<p class=\"muted\">no link measured yet</p></section>");
        } else {
            let _ = write!(
                o,
                "<p class=\"muted\">{} links measured; no placement crosses one yet</p></section>",
                d.links_measured
            );
        }
        return;
    }
    if d.node_names.len() > MATRIX_NODES_MAX || d.links.len() < d.links_measured {
        link_list(o, d);
        return;
    }
    let by: HashMap<(&str, &str), &super::fleet::LinkDoc> = d
        .links
        .iter()
        .map(|l| ((l.from.as_str(), l.to.as_str()), l))
        .collect();
    o.push_str(
        "<p class=\"muted\">latency ± jitter, loss; row: from, column: to</p><table><tr>\
         <th class=\"l\">from \\ to</th>",
    );
    for n in &d.node_names {
        let _ = write!(o, "<th>{}</th>", esc(n));
    }
    o.push_str("</tr>");
    for from in &d.node_names {
        let _ = write!(o, "<tr><th class=\"l\">{}</th>", esc(from));
        for to in &d.node_names {
            match by.get(&(from.as_str(), to.as_str())) {
                Some(l) => {
                    let _ = write!(
                        o,
                        "<td title=\"{} samples, {:.1} s old\">{:.1} ±{:.1} ms, {:.1} %</td>",
                        l.samples,
                        l.age_ms as f64 / 1000.0,
                        l.latency_ms,
                        l.jitter_ms,
                        l.loss * 100.0
                    );
                }
                None => o.push_str("<td class=\"muted\">·</td>"),
            }
        }
        o.push_str("</tr>");
    }
    o.push_str("</table></section>");
}

/// A large fleet's links as a list (a matrix of its nodes would not fit a page).
fn link_list(o: &mut String, d: &FleetDoc) {
    let what = if d.links.len() < d.links_measured {
        format!(
            "{} of {} measured links: those the placements' channels cross",
            d.links.len(),
            d.links_measured
        )
    } else {
        format!("{} measured links", d.links.len())
    };
    let _ = write!(
        o,
        "<p class=\"muted\">{what}</p><table><tr><th class=\"l\">from</th><th class=\"l\">to</th>\
         <th>latency ± jitter</th><th>loss</th><th>samples</th><th>age</th></tr>"
    );
    for l in &d.links {
        let LinkDoc {
            from,
            to,
            latency_ms,
            jitter_ms,
            loss,
            samples,
            age_ms,
        } = l;
        let _ = write!(
            o,
            "<tr><td class=\"l\">{}</td><td class=\"l\">{}</td><td>{latency_ms:.1} ±{jitter_ms:.1} ms</td>\
             <td>{:.1} %</td><td>{samples}</td><td>{:.1} s</td></tr>",
            esc(from),
            esc(to),
            loss * 100.0,
            *age_ms as f64 / 1000.0
        );
    }
    o.push_str("</table></section>");
}

fn events(o: &mut String, d: &FleetDoc) {
    o.push_str("<section id=\"events\"><h2>Recent events</h2><ol>");
    for e in d.events.iter().rev() {
        let secs = e.at_unix_ms / 1000;
        let _ = write!(
            o,
            "<li data-kind=\"{}\"><time>{:02}:{:02}:{:02}</time>{}</li>",
            e.kind,
            (secs / 3600) % 24,
            (secs / 60) % 60,
            secs % 60,
            esc(&e.text)
        );
    }
    o.push_str("</ol></section>");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_is_escaped() {
        assert_eq!(
            esc("<a href=\"x\">&'"),
            "&lt;a href=&quot;x&quot;&gt;&amp;&#39;"
        );
    }

    /// A fleet of `n` nodes, 4 a datacenter, all online; `busy` of them run a container and
    /// one is unreachable; the document holds `links` of `measured` links.
    fn fleet_of(n: usize, busy: usize, links: Vec<LinkDoc>, measured: usize) -> FleetDoc {
        let node = |i: usize| NodeDoc {
            name: format!("n{i:05}"),
            state: if i == 7 { "unreachable" } else { "online" },
            layer: "edge".into(),
            arch: "aarch64".into(),
            cpu_millis: 0,
            cpu_capacity_millis: 4000,
            memory_mb: 0,
            memory_capacity_mb: 4096,
            disk_mb: 0,
            disk_capacity_mb: 0,
            containers: u32::from(i < busy),
            silent_ms: 0,
            coordinate: None,
        };
        FleetDoc {
            at_unix_ms: 0,
            model_version: 1,
            datacenters: (0..n.div_ceil(4))
                .map(|d| super::super::fleet::DatacenterDoc {
                    name: format!("dc{d:04}"),
                    nodes: (d * 4..(d * 4 + 4).min(n)).map(node).collect(),
                })
                .collect(),
            node_names: (0..n).map(|i| format!("n{i:05}")).collect(),
            links,
            links_measured: measured,
            apps: vec![],
            counters: Default::default(),
            events: vec![],
        }
    }

    fn link(from: &str, to: &str) -> LinkDoc {
        LinkDoc {
            from: from.into(),
            to: to.into(),
            latency_ms: 4.25,
            jitter_ms: 0.5,
            loss: 0.01,
            samples: 20,
            age_ms: 1500,
        }
    }

    #[test]
    fn a_small_fleets_links_are_a_matrix_of_every_node() {
        let d = fleet_of(3, 0, vec![link("n00000", "n00001")], 1);
        let b = body(Some(&d));
        assert!(b.contains("from \\ to"), "a matrix");
        assert_eq!(
            b.matches("<td class=\"muted\">·</td>").count(),
            8,
            "3 x 3 cells, one link"
        );
        assert_eq!(
            b.matches("class=\"node state-").count(),
            3,
            "a card per node"
        );
    }

    /// The page of a 2,000-node fleet: its matrix alone was 4 million cells (about 100 MB,
    /// and 60 GB at 50,000 nodes) each time the page reloaded.
    #[test]
    fn a_large_fleets_page_lists_its_links_and_draws_the_nodes_that_matter() {
        let links = vec![link("n00003", "n01999"), link("n00010", "n00011")];
        let d = fleet_of(2000, 5, links, 64_000);
        let b = body(Some(&d));
        assert!(b.len() < 1 << 20, "{} bytes", b.len());
        assert!(!b.contains("from \\ to"), "no matrix");
        assert!(b.contains("2 of 64000 measured links: those the placements' channels cross"));
        assert!(
            b.contains("<td class=\"l\">n01999</td><td>4.2 ±0.5 ms</td>"),
            "{b}"
        );
        // a card for each node running a container, and for the unreachable one
        assert_eq!(b.matches("class=\"node state-").count(), 6);
        assert!(b.contains("data-node=\"n00007\""));
        assert!(b.contains("2000 nodes: a card for each node not online or running containers (6)"));
        assert!(b.contains("<span class=\"muted\">3 online, 1 unreachable</span>"));
        // more noteworthy nodes than cards: the first NODE_CARDS_MAX drawn
        let d = fleet_of(2000, 1200, vec![], 64_000);
        let b = body(Some(&d));
        assert_eq!(b.matches("class=\"node state-").count(), NODE_CARDS_MAX);
        assert!(b.contains("(1200, the first 500 drawn)"));
        assert!(b.contains("64000 links measured; no placement crosses one yet"));
    }

    #[test]
    fn the_page_has_its_ids_before_the_first_view() {
        let p = page(None);
        for id in [
            "view", "summary", "fleet", "apps", "links", "events", "updated",
        ] {
            assert!(p.contains(&format!("id=\"{id}\"")), "{id}");
        }
    }
}

//! Who may publish and read which topic: the one table that both the embedded broker (at every
//! publication and subscription) and Mosquitto's generated ACL file apply.
//!
//! - The control plane and the admin (the CLI, whose password sits in the same credentials file)
//!   publish and read everything under `acoa/`: definitions, statuses, desired states, peers, jobs.
//! - A node publishes only its own report, links, online marker, actual state and usage, and
//!   reads only its own desired state, its online marker and its own peer list.
//! - A scheduler worker reads the jobs (also through `$share/{group}/`) and writes its own results.
//!
//! Whatever the table says, a published topic with a wildcard (`+`, `#`) or starting with `$` is
//! refused, and so is a publication larger than its readers accept ([`receiver_limit`]): one
//! login cannot make another client's retained topic unreadable.
//!
//! The MQTT client ids of the system's own connections are reserved ([`may_use_client_id`],
//! applied by the embedded broker when a client connects): a broker closes the session of a
//! client id when another connection takes it, so a node that could connect as
//! `acoa-control-plane-apps` would throw the control plane off its broker, again and again.
//! Mosquitto's ACL cannot say it: there the fleet's listener makes every client's id its
//! login's name, and no node or worker name begins with [`SYSTEM_PREFIX`]
//! (`cloud-broker mosquitto-config`).

use super::{actual, desired, links, online, peers, report, usage, AGENT_MAX_PACKET};
use crate::jobs;

/// What a login is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Role {
    ControlPlane,
    Admin,
    Node,
    Worker,
}

/// What a grant allows on its filter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    Read,
    Write,
    ReadWrite,
}

impl Access {
    fn reads(self) -> bool {
        matches!(self, Access::Read | Access::ReadWrite)
    }
    fn writes(self) -> bool {
        matches!(self, Access::Write | Access::ReadWrite)
    }
    /// The word Mosquitto's ACL file uses.
    pub fn mosquitto(self) -> &'static str {
        match self {
            Access::Read => "read",
            Access::Write => "write",
            Access::ReadWrite => "readwrite",
        }
    }
}

/// One line of the table: `access` on the topics `filter` matches.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Grant {
    pub access: Access,
    pub filter: String,
}

fn grant(access: Access, filter: impl Into<String>) -> Grant {
    Grant {
        access,
        filter: filter.into(),
    }
}

/// The grants of `user` in `role`. A user name that is not one topic level (empty, or with `/`,
/// `+`, `#`) gets none: it could otherwise widen its own filters.
pub fn grants(role: Role, user: &str) -> Vec<Grant> {
    use Access::*;
    match role {
        Role::ControlPlane | Role::Admin => vec![grant(ReadWrite, "acoa/#")],
        _ if user.is_empty() || user.contains(['/', '+', '#']) => Vec::new(),
        Role::Node => vec![
            grant(Write, report(user)),
            grant(Write, links(user)),
            grant(ReadWrite, online(user)),
            grant(Write, actual(user)),
            grant(Write, usage(user)),
            grant(Read, desired(user)),
            grant(Read, peers(user)),
        ],
        Role::Worker => vec![grant(Read, jobs::JOBS), grant(Write, jobs::results(user))],
    }
}

/// Why a publication or a subscription is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    #[error("`{0}` is not a topic one may publish on (empty, a wildcard `+` or `#`, or `$`)")]
    BadTopic(String),
    #[error("`{0}` is not a valid topic filter")]
    BadFilter(String),
    #[error("`{user}` may not publish on `{topic}`")]
    Publish { user: String, topic: String },
    #[error("`{user}` may not subscribe to `{filter}`")]
    Subscribe { user: String, filter: String },
    #[error(
        "`{user}` may not connect as `{client_id}`: that client id is reserved for another login"
    )]
    ClientId { user: String, client_id: String },
    #[error("{len} bytes on `{topic}`: its readers accept at most {max}")]
    TooLarge {
        topic: String,
        len: usize,
        max: usize,
    },
}

/// The beginning of every client id of the system's own connections (the four prefixes
/// below) and of the control plane's and the admin's logins. A node's or a worker's name never
/// begins with it ([`is_system_name`]): where a broker makes a login's name its client id
/// (Mosquitto's fleet listener), no login's name is one of the system's client ids.
pub const SYSTEM_PREFIX: &str = "acoa-";

/// Is `name` reserved for the system's own logins and client ids (it begins with
/// [`SYSTEM_PREFIX`])?
pub fn is_system_name(name: &str) -> bool {
    name.starts_with(SYSTEM_PREFIX)
}

/// The client id prefix of the control plane's connections (`acoa-control-plane`,
/// `acoa-control-plane-apps`, ..., and a replica's suffix).
pub const CONTROL_PLANE_CLIENT_PREFIX: &str = "acoa-control-plane";
/// An agent's client id: this and its node's name.
pub const AGENT_CLIENT_PREFIX: &str = "acoa-agent-";
/// A scheduler worker's client id: this and the worker's name.
pub const WORKER_CLIENT_PREFIX: &str = "acoa-sched-worker-";
/// The command line's client id: this and its process id.
pub const CLI_CLIENT_PREFIX: &str = "acoa-cli-";

/// May `user` in `role` connect with `client_id`? The system's own client ids are reserved:
/// the control plane's for the control plane's login, an agent's for its node's login, a
/// worker's for worker logins, the command line's for the admin. Any other id is anyone's.
pub fn may_use_client_id(role: Role, user: &str, client_id: &str) -> Result<(), Refusal> {
    let allowed = if client_id.starts_with(CONTROL_PLANE_CLIENT_PREFIX) {
        role == Role::ControlPlane
    } else if let Some(node) = client_id.strip_prefix(AGENT_CLIENT_PREFIX) {
        role == Role::Node && node == user
    } else if client_id.starts_with(WORKER_CLIENT_PREFIX) {
        role == Role::Worker
    } else if client_id.starts_with(CLI_CLIENT_PREFIX) {
        role == Role::Admin
    } else {
        true
    };
    if allowed {
        Ok(())
    } else {
        Err(Refusal::ClientId {
            user: user.to_string(),
            client_id: client_id.to_string(),
        })
    }
}

/// The largest payload the readers of `topic` accept, where it is less than the broker's own
/// limit: agents read their desired state and their peer list in packets of at most
/// [`AGENT_MAX_PACKET`] (the topic and a packet id count too); workers read jobs of at most
/// [`jobs::MAX_JOB_BYTES`].
pub fn receiver_limit(topic: &str) -> Option<usize> {
    let agent = || AGENT_MAX_PACKET.saturating_sub(2 + topic.len() + 2);
    match super::parse(topic) {
        Some(super::Topic::Desired(_)) | Some(super::Topic::Peers(_)) => Some(agent()),
        _ if topic == jobs::JOBS => Some(jobs::MAX_JOB_BYTES),
        _ => None,
    }
}

/// May `user` in `role` publish `payload_len` bytes on `topic`?
pub fn may_publish(role: Role, user: &str, topic: &str, payload_len: usize) -> Result<(), Refusal> {
    if topic.is_empty() || topic.starts_with('$') || topic.contains(['+', '#', '\0']) {
        return Err(Refusal::BadTopic(topic.to_string()));
    }
    let levels: Vec<&str> = topic.split('/').collect();
    let granted = grants(role, user)
        .iter()
        .any(|g| g.access.writes() && covers(&g.filter, &levels));
    if !granted {
        return Err(Refusal::Publish {
            user: user.to_string(),
            topic: topic.to_string(),
        });
    }
    match receiver_limit(topic) {
        Some(max) if payload_len > max => Err(Refusal::TooLarge {
            topic: topic.to_string(),
            len: payload_len,
            max,
        }),
        _ => Ok(()),
    }
}

/// May `user` in `role` subscribe to `filter` (`$share/{group}/` is read through)? Only if
/// every topic the filter matches is one the user may read.
pub fn may_subscribe(role: Role, user: &str, filter: &str) -> Result<(), Refusal> {
    let bad = || Refusal::BadFilter(filter.to_string());
    let inner = match filter.strip_prefix("$share/") {
        Some(rest) => match rest.split_once('/') {
            Some((group, f)) if !group.is_empty() && !group.contains(['+', '#']) => f,
            _ => return Err(bad()),
        },
        None => filter,
    };
    if !valid_filter(inner) || inner.starts_with('$') {
        return Err(bad());
    }
    let levels: Vec<&str> = inner.split('/').collect();
    let granted = grants(role, user)
        .iter()
        .any(|g| g.access.reads() && covers(&g.filter, &levels));
    if granted {
        Ok(())
    } else {
        Err(Refusal::Subscribe {
            user: user.to_string(),
            filter: filter.to_string(),
        })
    }
}

/// A filter of MQTT: not empty, no NUL, `#` only as the whole last level, `+` only as a whole
/// level.
fn valid_filter(filter: &str) -> bool {
    if filter.is_empty() || filter.contains('\0') {
        return false;
    }
    let levels: Vec<&str> = filter.split('/').collect();
    levels.iter().enumerate().all(|(i, l)| {
        (!l.contains('#') || (*l == "#" && i + 1 == levels.len()))
            && (!l.contains('+') || *l == "+")
    })
}

/// Does the grant's filter match every topic that `levels` (a topic or a valid filter) matches?
fn covers(grant: &str, levels: &[&str]) -> bool {
    let g: Vec<&str> = grant.split('/').collect();
    covers_levels(&g, levels)
}

fn covers_levels(grant: &[&str], req: &[&str]) -> bool {
    match (grant.first(), req.first()) {
        // `a/#` also matches `a`
        (Some(&"#"), _) => true,
        (None, None) => true,
        (Some(g), Some(r)) => {
            let level_ok = match (*g, *r) {
                (_, "#") => false,
                ("+", _) => true,
                (_, "+") => false,
                (g, r) => g == r,
            };
            level_ok && covers_levels(&grant[1..], &req[1..])
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::topics::{app, app_status};

    const ALL: [Role; 4] = [Role::ControlPlane, Role::Admin, Role::Node, Role::Worker];

    #[test]
    fn every_client_id_of_the_system_begins_with_its_prefix() {
        for p in [
            CONTROL_PLANE_CLIENT_PREFIX,
            AGENT_CLIENT_PREFIX,
            WORKER_CLIENT_PREFIX,
            CLI_CLIENT_PREFIX,
        ] {
            assert!(is_system_name(p), "{p}");
        }
        assert!(!is_system_name("n1") && !is_system_name("acoa") && !is_system_name("xacoa-1"));
    }

    #[test]
    fn the_systems_client_ids_are_reserved_for_their_logins() {
        use Role::*;
        for (role, user, id, ok) in [
            (
                ControlPlane,
                "acoa-control-plane",
                "acoa-control-plane",
                true,
            ),
            (
                ControlPlane,
                "acoa-control-plane",
                "acoa-control-plane-lists-r1",
                true,
            ),
            (Node, "n1", "acoa-control-plane-apps", false),
            (Admin, "admin", "acoa-control-plane", false),
            (Worker, "w1", "acoa-control-plane-sched", false),
            (Node, "n1", "acoa-agent-n1", true),
            (Node, "n1", "acoa-agent-n2", false),
            (Node, "n1", "acoa-agent-n1x", false),
            (Admin, "admin", "acoa-agent-n1", false),
            (Worker, "w1", "acoa-sched-worker-w1", true),
            (Node, "n1", "acoa-sched-worker-w1", false),
            (Admin, "admin", "acoa-cli-42", true),
            (Node, "n1", "acoa-cli-42", false),
            (Node, "n1", "n1-tool", true),
        ] {
            let r = may_use_client_id(role, user, id);
            assert_eq!(r.is_ok(), ok, "{role:?} {user} as {id}: {r:?}");
        }
        let e = may_use_client_id(Node, "n1", "acoa-control-plane").unwrap_err();
        assert_eq!(
            e.to_string(),
            "`n1` may not connect as `acoa-control-plane`: that client id is reserved for another login"
        );
    }

    #[test]
    fn a_node_publishes_only_under_its_own_topics() {
        for t in [
            report("n1"),
            links("n1"),
            online("n1"),
            actual("n1"),
            usage("n1"),
        ] {
            assert_eq!(may_publish(Role::Node, "n1", &t, 100), Ok(()), "{t}");
            assert!(may_publish(Role::Node, "n2", &t, 100).is_err(), "{t}");
        }
        for t in [
            desired("n1"),
            desired("n2"),
            peers("n1"),
            app("a"),
            app_status("a"),
            jobs::JOBS.to_string(),
            jobs::results("n1"),
            "acoa/v1/nodes/n1/other".into(),
            "elsewhere".into(),
        ] {
            assert_eq!(
                may_publish(Role::Node, "n1", &t, 1),
                Err(Refusal::Publish {
                    user: "n1".into(),
                    topic: t.clone()
                }),
                "{t}"
            );
        }
    }

    #[test]
    fn a_node_reads_only_its_desired_state_its_marker_and_its_peers() {
        for f in [desired("n1"), online("n1"), peers("n1")] {
            assert_eq!(may_subscribe(Role::Node, "n1", &f), Ok(()), "{f}");
        }
        for f in [
            "#",
            "acoa/#",
            "acoa/v1/nodes/+/desired",
            "acoa/v1/nodes/n1/#",
            "acoa/v1/nodes/n1/+",
            "acoa/v1/nodes/+/peers",
            "acoa/v1/peers",
            "acoa/v1/apps/+",
            "acoa/v1/apps/+/status",
            "$share/g/acoa/v1/sched/jobs",
            "$share/g/#",
        ] {
            assert!(may_subscribe(Role::Node, "n1", f).is_err(), "{f}");
        }
        assert!(may_subscribe(Role::Node, "n1", &desired("n2")).is_err());
        assert!(may_subscribe(Role::Node, "n1", &peers("n2")).is_err());
        assert!(may_subscribe(Role::Node, "n1", &report("n1")).is_err());
    }

    #[test]
    fn workers_read_jobs_and_write_their_results() {
        assert_eq!(
            may_subscribe(Role::Worker, "w1", &jobs::shared_jobs("g")),
            Ok(())
        );
        assert_eq!(may_subscribe(Role::Worker, "w1", jobs::JOBS), Ok(()));
        assert_eq!(
            may_publish(Role::Worker, "w1", &jobs::results("w1"), 10),
            Ok(())
        );
        assert!(may_publish(Role::Worker, "w1", &jobs::results("w2"), 10).is_err());
        assert!(may_publish(Role::Worker, "w1", jobs::JOBS, 10).is_err());
        assert!(may_subscribe(Role::Worker, "w1", "acoa/v1/nodes/+/desired").is_err());
        assert!(may_subscribe(Role::Worker, "w1", "acoa/v1/sched/+").is_err());
        assert!(may_publish(Role::Worker, "w1", &report("w1"), 10).is_err());
    }

    #[test]
    fn the_control_plane_and_the_admin_publish_definitions_statuses_and_desired_states() {
        for r in [Role::ControlPlane, Role::Admin] {
            for t in [app("a"), app_status("a"), desired("n1"), peers("n1")] {
                assert_eq!(may_publish(r, "x", &t, 1000), Ok(()), "{t}");
            }
            for f in ["acoa/#", "acoa/v1/nodes/+/+", "acoa/v1/apps/+/status"] {
                assert_eq!(may_subscribe(r, "x", f), Ok(()), "{f}");
            }
            assert!(may_subscribe(r, "x", "#").is_err());
            assert!(may_publish(r, "x", "other/topic", 1).is_err());
        }
        for r in [Role::Node, Role::Worker] {
            for t in [app("a"), app_status("a"), desired("n1")] {
                assert!(may_publish(r, "n1", &t, 1).is_err(), "{t}");
            }
        }
        // the loopback: only the control plane's (a node could make it look on time, or
        // late); it reads its own telemetry filter, the loopback's included
        for f in crate::topics::NODES_TELEMETRY {
            assert_eq!(may_subscribe(Role::ControlPlane, "cp", f), Ok(()), "{f}");
        }
        assert_eq!(
            may_publish(Role::ControlPlane, "cp", &crate::topics::loopback(0), 17),
            Ok(())
        );
        for r in [Role::Node, Role::Worker] {
            assert!(may_publish(r, "n1", &crate::topics::loopback(0), 17).is_err());
            assert!(may_subscribe(r, "n1", "acoa/v1/control/loopback/+").is_err());
        }
    }

    #[test]
    fn wildcards_and_system_topics_are_never_published() {
        for r in ALL {
            for t in [
                "acoa/v1/apps/+",
                "acoa/v1/apps/#",
                "acoa/v1/nodes/n1/report/#",
                "acoa/v1/nodes/+/report",
                "acoa/v1/nodes/n1/rep+ort",
                "$SYS/x",
                "",
            ] {
                assert_eq!(
                    may_publish(r, "n1", t, 1),
                    Err(Refusal::BadTopic(t.into())),
                    "{r:?} {t}"
                );
            }
        }
    }

    #[test]
    fn malformed_filters_are_named() {
        for f in [
            "",
            "a/#/b",
            "a/b#",
            "a+/b",
            "$share/g",
            "$share//x",
            "$share/+/x",
        ] {
            assert_eq!(
                may_subscribe(Role::ControlPlane, "cp", f),
                Err(Refusal::BadFilter(f.into())),
                "{f}"
            );
        }
        assert_eq!(
            Refusal::BadFilter("a/#/b".into()).to_string(),
            "`a/#/b` is not a valid topic filter"
        );
    }

    #[test]
    fn oversized_publications_on_what_agents_and_workers_read_are_refused() {
        let cp = Role::ControlPlane;
        let d = desired("n1");
        let max = receiver_limit(&d).unwrap();
        // the largest payload still fits the agent's packet with its topic and packet id
        assert_eq!(max + 2 + d.len() + 2, AGENT_MAX_PACKET);
        assert_eq!(may_publish(cp, "cp", &d, max), Ok(()));
        assert_eq!(
            may_publish(cp, "cp", &d, 600_000),
            Err(Refusal::TooLarge {
                topic: d.clone(),
                len: 600_000,
                max
            })
        );
        assert!(may_publish(cp, "cp", &peers("n1"), 600_000).is_err());
        assert!(may_publish(cp, "cp", jobs::JOBS, jobs::MAX_JOB_BYTES + 1).is_err());
        // what only the control plane reads is bounded by the broker alone
        assert_eq!(receiver_limit(&report("n1")), None);
        assert_eq!(
            may_publish(Role::Node, "n1", &report("n1"), 600_000),
            Ok(())
        );
    }

    #[test]
    fn user_names_that_are_not_one_level_get_nothing() {
        for u in ["", "+", "#", "n1/desired", "a+b"] {
            assert!(grants(Role::Node, u).is_empty(), "{u}");
            assert!(grants(Role::Worker, u).is_empty(), "{u}");
            assert!(may_subscribe(Role::Node, u, &peers(u)).is_err());
        }
    }

    #[test]
    fn covering_is_the_subset_relation_of_filters() {
        let c = |g: &str, r: &str| covers(g, &r.split('/').collect::<Vec<_>>());
        assert!(c("acoa/#", "acoa"));
        assert!(c("acoa/#", "acoa/v1/+/x/#"));
        assert!(c("a/+/c", "a/+/c"));
        assert!(c("a/+/c", "a/b/c"));
        assert!(!c("a/+/c", "a/#"));
        assert!(!c("a/b/c", "a/+/c"));
        assert!(!c("a/b", "a/b/c"));
        assert!(!c("a/b/c", "a/b"));
        assert!(!c("acoa/#", "#"));
    }
}

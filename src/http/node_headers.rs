//! Headers the nodes of a cluster add for one another.

/// A request passed on carries this, so it is never passed on again (a leader's URL that
/// names a standby would otherwise send requests round in circles).
pub const FORWARDED: &str = "x-orderly-forwarded";

/// `FORWARDED`'s value on a request a node passes to itself (its next generation, which leads
/// now): that generation may still pass it to a shard's leader on another node.
pub const FORWARDED_BY_SELF: &str = "self";

/// On a request between nodes (`http::parcels`), and on one passed on over HTTP: the name the
/// asking node announced itself by in the database.
pub const NODE: &str = "x-orderly-node";

/// On every 503, which says nothing of the request was read or kept: a node that does not
/// lead refusing a passed-on request, a server past its connection limit, a leader whose log
/// refused the change. The passing node may send such a request again.
pub const NOT_SERVED: &str = "x-orderly-not-served";

/// Headers a node may add to a request it passes on (the marker above; `Host`, `Accept` and
/// `Content-Length` when the client sent none; its name, over HTTP): the server takes this
/// many more from a request that carries the marker.
pub const ADDED_HEADERS: usize = 5;

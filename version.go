package streamq

// Version is the version of this module, printed by `streamq version`. It
// follows semantic versioning; the wire format has its own version,
// [WireVersion].
const Version = "0.1.0"

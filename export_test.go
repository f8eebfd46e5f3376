package streamq

// Promote exposes [Queue.promote] to the tests of package streamq_test: it
// moves up to limit jobs due at now from q's delayed set into the stream, as
// one scheduler tick does, and returns how many it moved.
var Promote = (*Queue).promote

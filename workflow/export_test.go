package workflow

// SetCompleteHook makes every call of the complete script of c's records
// (for the records of nodes) go through hook, which may call it (call) or not, and return another
// error: tests inject records that fail, or that ran but whose reply was
// lost.
func SetCompleteHook(c *Client, hook func(nodes []string, call func() error) error) {
	c.completeHook = hook
}

// RecordTries is the number of calls of one record before it gives up.
const RecordTries = recordTries

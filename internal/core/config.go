package core

import "time"

// Duration is a duration field of a config struct, for [Durations].
type Duration struct {
	Field string         // the field's name, as errors show it
	V     *time.Duration // the field
	Def   time.Duration  // its default, taken for 0
	Off   bool           // -1 is allowed (it disables what the field times)
}

// Bytes is a size field of a config struct whose 0 means its default and -1
// no bound, for [Sizes].
type Bytes struct {
	Field string
	V     *int64
	Def   int64
}

// ErrFunc builds the configuration error of a field.
type ErrFunc func(field, format string, args ...any) error

// Durations sets zero durations to their defaults and rejects negative
// ones (but -1 where Off), so that the stream consumer and the priority
// worker apply their shared fields by the same rules.
func Durations(ds []Duration, errf ErrFunc) error {
	for _, d := range ds {
		switch {
		case *d.V == 0:
			*d.V = d.Def
		case *d.V == -1 && d.Off:
		case *d.V < 0:
			hint := "use a positive duration or 0 for the default"
			if d.Off {
				hint += ", or -1 to disable"
			}
			return errf(d.Field, "%s is negative: %s (%s)", *d.V, hint, d.Def)
		}
	}
	return nil
}

// Sizes sets zero sizes to their defaults and rejects negative ones but -1.
func Sizes(bs []Bytes, errf ErrFunc) error {
	for _, b := range bs {
		switch {
		case *b.V == 0:
			*b.V = b.Def
		case *b.V < -1:
			return errf(b.Field, "%d is negative: use a positive number of bytes, 0 for %d, or -1 for no bound", *b.V, b.Def)
		}
	}
	return nil
}

// Control checks the control fields the consumer and the worker share,
// after [Durations] applied their defaults.
func Control(interval, minInterval, defInterval, retention, defRetention time.Duration, errf ErrFunc) error {
	if interval < minInterval {
		return errf("ControlInterval", "%s is too short: use at least %s (default %s)", interval, minInterval, defInterval)
	}
	if retention < time.Millisecond {
		return errf("ResultRetention", "%s is below 1ms: use a longer retention, or 0 for %s", retention, defRetention)
	}
	return nil
}

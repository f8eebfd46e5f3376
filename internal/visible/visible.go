// Package visible shows text from jobs (payloads, headers, errors, names) so
// that what a reader sees is what is there: characters that would not show
// as themselves, or would reorder the text around them (right-to-left
// overrides, zero-width characters), are written as escapes instead.
package visible

import (
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Hidden reports whether r would not show as itself: a control character,
// a format character (bidirectional overrides and isolates, zero-width
// spaces and joiners, the byte-order mark, soft hyphens, tags), a line or
// paragraph separator, or a blank filler letter.
func Hidden(r rune) bool {
	switch {
	case unicode.IsControl(r), unicode.In(r, unicode.Cf, unicode.Zl, unicode.Zp):
		return true
	}
	switch r {
	case 0x115F, 0x1160, 0x3164, 0xFFA0, 0x2800: // Hangul fillers, braille blank
		return true
	}
	return false
}

// Escape returns s with every Hidden rune, and every byte that is not UTF-8,
// written as a Go escape (\u202e, \x00). With multiline, tabs and line
// breaks are kept as they are; otherwise they are escaped too, so that the
// result is one line.
func Escape(s string, multiline bool) string {
	if clean(s, multiline) {
		return s
	}
	var b strings.Builder
	b.Grow(len(s) + 16)
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			b.WriteString(`\x`)
			b.WriteString(strconv.FormatUint(uint64(s[i])>>4, 16))
			b.WriteString(strconv.FormatUint(uint64(s[i])&15, 16))
		case Hidden(r) && !(multiline && (r == '\n' || r == '\t' || r == '\r')):
			q := strconv.QuoteRuneToASCII(r)
			b.WriteString(q[1 : len(q)-1])
		default:
			b.WriteString(s[i : i+size])
		}
		i += size
	}
	return b.String()
}

// clean reports whether Escape would leave s as it is.
func clean(s string, multiline bool) bool {
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c < 0x20 || c == 0x7f {
				if !multiline || (c != '\n' && c != '\t' && c != '\r') {
					return false
				}
			}
			i++
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if (r == utf8.RuneError && size == 1) || Hidden(r) {
			return false
		}
		i += size
	}
	return true
}

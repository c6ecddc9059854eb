// Package truncate bounds text to a byte budget without splitting a UTF-8
// sequence: the one cut shared by diagnostics, error texts, progress notes,
// stderr tails and stored closing messages. A cut is marked with an
// ellipsis (Head, Bound, Tail) or left to the caller to mark (Prefix).
package truncate

import "unicode/utf8"

// Ellipsis marks where text was cut.
const Ellipsis = "…"

// Prefix returns the longest prefix of s of at most n bytes that does not
// end inside a UTF-8 sequence; s itself when it fits.
func Prefix(s string, n int) string {
	if len(s) <= n {
		return s
	}
	if n <= 0 {
		return ""
	}
	cut := n
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut]
}

// Head keeps at most n bytes of s's start and marks the cut with Ellipsis
// (so a cut result is up to len(Ellipsis) bytes longer than n).
func Head(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return Prefix(s, n) + Ellipsis
}

// Bound is Head within n bytes in all, the ellipsis included: for fields
// with a hard size limit.
func Bound(s string, n int) string {
	if len(s) <= n {
		return s
	}
	if n < len(Ellipsis) {
		return Prefix(s, n)
	}
	return Prefix(s, n-len(Ellipsis)) + Ellipsis
}

// Tail keeps at most n bytes of s's end, starting on a rune boundary, and
// marks the cut with a leading Ellipsis.
func Tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	if n < 0 {
		n = 0
	}
	cut := len(s) - n
	for cut < len(s) && !utf8.RuneStart(s[cut]) {
		cut++
	}
	return Ellipsis + s[cut:]
}

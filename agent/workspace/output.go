package workspace

import (
	"fmt"
	"strings"
	"time"
	"unicode/utf8"
)

// headTail keeps the first and the last bytes written to it, up to max in
// all, and counts what it drops in between. Not safe for concurrent use.
type headTail struct {
	headMax, tailMax int
	head, tail       []byte
	total            int64
}

func newHeadTail(max int) *headTail {
	h := max / 2
	return &headTail{headMax: h, tailMax: max - h}
}

func (b *headTail) Write(p []byte) (int, error) {
	n := len(p)
	b.total += int64(n)
	if room := b.headMax - len(b.head); room > 0 {
		k := min(room, len(p))
		b.head = append(b.head, p[:k]...)
		p = p[k:]
	}
	if len(p) > 0 {
		b.tail = append(b.tail, p...)
		if len(b.tail) > 2*b.tailMax {
			b.tail = append(b.tail[:0], b.tail[len(b.tail)-b.tailMax:]...)
		}
	}
	return n, nil
}

// String returns everything if it fitted, else the head, a note saying how
// much was left out, and the tail; cut at UTF-8 boundaries.
func (b *headTail) String() string {
	tail := b.tail
	if len(tail) > b.tailMax {
		tail = tail[len(tail)-b.tailMax:]
	}
	omitted := b.total - int64(len(b.head)) - int64(len(tail))
	if omitted == 0 {
		return validUTF8(string(b.head) + string(tail))
	}
	head := cutUTF8(b.head, len(b.head))
	for len(tail) > 0 && !utf8.RuneStart(tail[0]) {
		tail = tail[1:]
	}
	omitted = b.total - int64(len(head)) - int64(len(tail))
	return validUTF8(string(head)) +
		fmt.Sprintf("\n[... %d bytes of output omitted; the output exceeded %s, only its beginning and end are shown ...]\n", omitted, size(b.headMax+b.tailMax)) +
		validUTF8(string(tail))
}

// cutUTF8 returns b[:n], shortened so as not to split a UTF-8 sequence.
func cutUTF8(b []byte, n int) []byte {
	if n >= len(b) {
		return b
	}
	b = b[:n]
	// Drop a trailing incomplete rune (at most utf8.UTFMax-1 bytes).
	for i := 1; i < utf8.UTFMax && i <= len(b); i++ {
		if utf8.RuneStart(b[len(b)-i]) {
			if !utf8.FullRune(b[len(b)-i:]) {
				b = b[:len(b)-i]
			}
			break
		}
	}
	return b
}

func validUTF8(s string) string { return strings.ToValidUTF8(s, "\uFFFD") }

// size renders a byte count for descriptions and notes: "64 KiB" or "100 bytes".
func size(n int) string {
	switch {
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%d MiB", n>>20)
	case n >= 1<<10 && n%(1<<10) == 0:
		return fmt.Sprintf("%d KiB", n>>10)
	}
	return fmt.Sprintf("%d bytes", n)
}

// duration renders d for descriptions and notes: "60 seconds", "1.5s".
func duration(d time.Duration) string {
	if d >= time.Second && d%time.Second == 0 {
		if d == time.Second {
			return "1 second"
		}
		return fmt.Sprintf("%d seconds", d/time.Second)
	}
	return d.String()
}

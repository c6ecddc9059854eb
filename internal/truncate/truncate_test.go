package truncate

import (
	"strings"
	"testing"
	"unicode/utf8"
)

func TestCutsKeepWholeRunesAndMarkTheCut(t *testing.T) {
	tests := []struct {
		name string
		fn   func(string, int) string
		s    string
		n    int
		want string
	}{
		{"Prefix of text that fits is the text", Prefix, "héllo", 6, "héllo"},
		{"Prefix backs off a split rune", Prefix, "aé", 2, "a"},
		{"Prefix of nothing", Prefix, "abc", 0, ""},
		{"Prefix with a negative budget", Prefix, "abc", -1, ""},
		{"Head of text that fits is unmarked", Head, "abc", 3, "abc"},
		{"Head cuts after n bytes and marks it", Head, "abcdef", 3, "abc…"},
		{"Head backs off a split 3-byte rune", Head, "ab€cd", 4, "ab…"},
		{"Head backs off a split 4-byte rune", Head, "a𝄞b", 3, "a…"},
		{"Bound of text that fits is unmarked", Bound, "abcdef", 6, "abcdef"},
		{"Bound counts the ellipsis in its budget", Bound, "abcdefgh", 6, "abc…"},
		{"Bound backs off a split rune before the ellipsis", Bound, "aé" + "xxxxx", 5, "a…"},
		{"Bound below the ellipsis's size drops the mark", Bound, "abcdef", 2, "ab"},
		{"Tail of text that fits is unmarked", Tail, "abc", 3, "abc"},
		{"Tail keeps the end and marks the cut before it", Tail, "abcdef", 3, "…def"},
		{"Tail skips forward past a split rune", Tail, "ab€cd", 4, "…cd"},
		{"Tail with a negative budget keeps nothing", Tail, "abc", -1, "…"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.fn(tt.s, tt.n); got != tt.want {
				t.Errorf("got %q, want %q", got, tt.want)
			}
		})
	}
}

// Every cut of multi-byte text, at every budget, is valid UTF-8, keeps a
// prefix (or suffix) of the original, and stays within its bound.
func TestEveryCutIsValidAndBounded(t *testing.T) {
	for _, r := range []string{"é", "€", "𝄞"} {
		for pre := 0; pre < 4; pre++ {
			s := strings.Repeat("a", pre) + strings.Repeat(r, 20)
			for n := 0; n <= len(s)+1; n++ {
				p, h, b, tl := Prefix(s, n), Head(s, n), Bound(s, n), Tail(s, n)
				for name, got := range map[string]string{"Prefix": p, "Head": h, "Bound": b, "Tail": tl} {
					if !utf8.ValidString(got) {
						t.Fatalf("%s(%q, %d) = %q is not valid UTF-8", name, s, n, got)
					}
				}
				if len(p) > n || !strings.HasPrefix(s, p) || (len(s) > n && len(p) < n-utf8.UTFMax+1) {
					t.Fatalf("Prefix(%q, %d) = %q", s, n, p)
				}
				if len(b) > n && len(s) > n {
					t.Fatalf("Bound(%q, %d) = %q is %d bytes", s, n, b, len(b))
				}
				if !strings.HasPrefix(s, strings.TrimSuffix(h, Ellipsis)) || !strings.HasSuffix(s, strings.TrimPrefix(tl, Ellipsis)) {
					t.Fatalf("Head/Tail(%q, %d) = %q, %q do not keep the original's ends", s, n, h, tl)
				}
				if kept := strings.TrimPrefix(tl, Ellipsis); len(s) > n && len(kept) > n {
					t.Fatalf("Tail(%q, %d) keeps %d bytes", s, n, len(kept))
				}
			}
		}
	}
}

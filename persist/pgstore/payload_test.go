package pgstore

import (
	"fmt"
	"slices"
	"strings"
	"testing"
)

// A commit's keys go out in one payload, without repeats, and come back
// as they went; keys that do not fit one payload share as few as hold
// them; a key no payload can carry wakes everyone instead of no one.
func TestPayloadsCarryACommitsKeysInOneNotify(t *testing.T) {
	keys := []string{"agent-1", "journal:agent-1", "principal:p", "journal:agent-1"}
	got := payloads(keys)
	if len(got) != 1 {
		t.Fatalf("payloads(%q) = %q; want one payload", keys, got)
	}
	if back := keysOf(got[0]); !slices.Equal(back, keys[:3]) {
		t.Fatalf("keysOf(%q) = %q; want %q", got[0], back, keys[:3])
	}
	if got := keysOf(payloads([]string{"c"})[0]); !slices.Equal(got, []string{"c"}) {
		t.Fatalf("a single key's payload reads back as %q; want [c]", got)
	}

	var many []string
	for i := range 3000 {
		many = append(many, fmt.Sprintf("principal:p%04d", i))
	}
	var back []string
	ps := payloads(many)
	for _, p := range ps {
		if len(p) > maxPayload {
			t.Fatalf("a payload of %d bytes; want at most %d", len(p), maxPayload)
		}
		back = append(back, keysOf(p)...)
	}
	slices.Sort(back)
	want := slices.Clone(many)
	slices.Sort(want)
	want = slices.Compact(want)
	if !slices.Equal(back, want) || len(ps) < 2 {
		t.Fatalf("%d keys in %d payloads read back as %d keys; want each once", len(want), len(ps), len(back))
	}

	for _, bad := range []string{strings.Repeat("k", maxPayload+1), "a\nb", wakeAll} {
		if got := payloads([]string{"c", bad}); !slices.Equal(got, []string{wakeAll}) {
			t.Errorf("payloads with a key of %d bytes = %.40q; want [%q]", len(bad), got, wakeAll)
		}
	}
}

// A commit's keys, whatever they are, reach every listener: each payload
// fits a NOTIFY, and the keys its listeners read back are the commit's
// (each once), or the payload wakes every watch.
func FuzzPayloads(f *testing.F) {
	f.Add("agent-1\x00journal:agent-1\x00principal:alice")
	f.Add("a\nb\x00c")
	f.Add(strings.Repeat("k", maxPayload+1))
	f.Fuzz(func(t *testing.T, joined string) {
		keys := strings.Split(joined, "\x00")
		ps := payloads(keys)
		want := map[string]bool{}
		for _, k := range keys {
			if k != "" { // no watch has the empty key
				want[k] = true
			}
		}
		got := map[string]int{}
		for _, p := range ps {
			if len(p) > maxPayload {
				t.Fatalf("a payload of %d bytes, over %d", len(p), maxPayload)
			}
			if p == wakeAll {
				return // every watch wakes: no key is missed
			}
			for _, k := range keysOf(p) {
				got[k]++
			}
		}
		for k := range want {
			if got[k] != 1 {
				t.Fatalf("key %q read back %d times from %q", k, got[k], ps)
			}
		}
		if len(got) != len(want) {
			t.Fatalf("payloads %q carry keys the commit did not signal (%d keys, %d read)", ps, len(want), len(got))
		}
	})
}

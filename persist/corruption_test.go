package persist

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/mcp-subagent/mcp-subagent/agent"
	"github.com/mcp-subagent/mcp-subagent/internal/managertest"
	"github.com/mcp-subagent/mcp-subagent/manager"
	"github.com/mcp-subagent/mcp-subagent/seam"
)

// pageMap reads a bbolt file's page structure (the documented on-disk
// format) to say which pages each child's data lives on: every page on
// the path from the root to each of its keys, and every page of its
// nested buckets. It is the test's oracle for "a child whose pages are
// intact".
type pageMap struct {
	data     []byte
	pageSize int
	// pages[id] holds the pages a child's reads touch.
	pages map[string]map[uint64]bool
}

const (
	flagBranch = 0x01
	flagLeaf   = 0x02
	flagBucket = 0x01 // leaf element flag
)

func readPageMap(t *testing.T, path string) *pageMap {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	pm := &pageMap{data: data, pages: map[string]map[uint64]bool{}}
	pm.pageSize = int(binary.LittleEndian.Uint32(data[16+8:]))
	// The live meta is the one with the higher txid.
	meta := func(i int) (root, txid uint64) {
		m := data[i*pm.pageSize+16:]
		return binary.LittleEndian.Uint64(m[16:]), binary.LittleEndian.Uint64(m[48:])
	}
	root, tx0 := meta(0)
	if r1, tx1 := meta(1); tx1 > tx0 {
		root = r1
	}
	pm.walk(root, nil, nil, nil)
	return pm
}

func (pm *pageMap) page(id uint64) []byte {
	return pm.data[int(id)*pm.pageSize:]
}

// walk visits the bucket tree rooted at page id (or the inline page
// inline); path is the bucket names from the root, stack the pages that
// lead here.
func (pm *pageMap) walk(id uint64, inline []byte, path []string, stack []uint64) {
	p := inline
	if p == nil {
		p = pm.page(id)
		overflow := binary.LittleEndian.Uint32(p[12:])
		stack = append(stack[:len(stack):len(stack)], id)
		for i := uint64(1); i <= uint64(overflow); i++ {
			stack = append(stack, id+i)
		}
	}
	flags := binary.LittleEndian.Uint16(p[8:])
	count := int(binary.LittleEndian.Uint16(p[10:]))
	for i := 0; i < count; i++ {
		e := p[16+16*i:]
		if flags&flagBranch != 0 {
			pm.walk(binary.LittleEndian.Uint64(e[8:]), nil, path, stack)
			continue
		}
		pos, ksize, vsize := binary.LittleEndian.Uint32(e[4:]), binary.LittleEndian.Uint32(e[8:]), binary.LittleEndian.Uint32(e[12:])
		key := string(e[pos : pos+ksize])
		val := e[pos+ksize : pos+ksize+vsize]
		pm.attribute(path, key, stack)
		if binary.LittleEndian.Uint32(e[0:])&flagBucket != 0 {
			root := binary.LittleEndian.Uint64(val)
			sub := append(path[:len(path):len(path)], key)
			if root == 0 {
				pm.walk(0, val[16:], sub, stack)
			} else {
				pm.walk(root, nil, sub, stack)
			}
		}
	}
}

// attribute credits the pages that lead to key in the bucket at path to
// the child the key belongs to.
func (pm *pageMap) attribute(path []string, key string, stack []uint64) {
	owner := ""
	switch {
	case len(path) == 0:
		return // a top-level bucket: every child's (counted via its keys' stacks)
	case len(path) == 1 && path[0] == "by_parent":
		return // a parent's index bucket: its entries are attributed below
	case len(path) == 1:
		owner = key // children, descriptors, journals, inboxes, checkpoints, active: keyed by child id
	case path[0] == "by_parent" && len(key) > 8:
		owner = key[8:]
	case path[0] == "journals" || path[0] == "inboxes":
		owner = path[1]
	}
	if owner == "" || path[0] == "notices" {
		return
	}
	if pm.pages[owner] == nil {
		pm.pages[owner] = map[uint64]bool{}
	}
	for _, id := range stack {
		pm.pages[owner][id] = true
	}
}

// corruptionFixture writes a store of children with journals, inboxes,
// active marks and notices, and returns its file's bytes.
func corruptionFixture(t *testing.T, dir string, n int) []string {
	t.Helper()
	s := openTest(t, dir)
	var ids []string
	for i := 0; i < n; i++ {
		id := fmt.Sprintf("agent-%04d", i)
		parent := "principal:local"
		if i%4 == 3 {
			parent = ids[i-1]
		}
		h := testHeader(id, parent, time.Duration(i)*time.Second)
		var events []agent.Event
		for turn := 0; turn < 1+i%4; turn++ {
			at := time.Date(2026, 1, 1, 0, 0, turn, 0, time.UTC)
			seq := int64(len(events))
			events = append(events,
				agent.Event{Seq: seq, Kind: agent.EventTurnStart, Time: at, Turn: turn + 1},
				agent.Event{Seq: seq + 1, Kind: agent.EventMessage, Time: at, Turn: turn + 1, Source: agent.SourceUser,
					Message: &seam.Message{Role: seam.RoleUser, Content: strings.Repeat(fmt.Sprintf("task %d of %s. ", turn, id), 20)}},
				agent.Event{Seq: seq + 2, Kind: agent.EventMessage, Time: at, Turn: turn + 1,
					Message: &seam.Message{Role: seam.RoleAssistant, Content: strings.Repeat("done. ", 40)}, Usage: &seam.Usage{InputTokens: 5, OutputTokens: 7}},
				agent.Event{Seq: seq + 3, Kind: agent.EventTurnEnd, Time: at, Turn: turn + 1, StopReason: agent.StopCompleted})
		}
		w := seam.ChildWrite{Create: &seam.NewChild{Header: h, Descriptor: testDescriptor()}, Events: events}
		if i%3 == 0 {
			w.Enqueue = []seam.QueuedMessage{{ID: "msg-" + id, Text: "queued for " + id, Source: agent.SourceUser}}
		}
		if err := s.WriteChild(ctx, id, w); err != nil {
			t.Fatal(err)
		}
		if i%5 != 0 {
			cp := seam.Checkpoint{Seq: int64(len(events)), Mode: seam.ModeContinuable, Stop: agent.StopCompleted}
			if err := s.WriteChild(ctx, id, seam.ChildWrite{Settle: &cp, Notify: &seam.ParentNotice{To: "principal:local",
				Notice: seam.Notice{ChildID: id, Source: agent.SourceSettled, Text: id + " finished"}}}); err != nil {
				t.Fatal(err)
			}
		}
		ids = append(ids, id)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	return ids
}

// ownPage returns a page only id's data uses.
func ownPage(pm *pageMap, id string) uint64 {
	var best uint64
	for pg := range pm.pages[id] {
		shared := false
		for other, pages := range pm.pages {
			shared = shared || (other != id && pages[pg])
		}
		if !shared && pg > best {
			best = pg
		}
	}
	return best
}

// childState is everything Repair promises to copy of a child.
type childState struct {
	Header     seam.Header
	Descriptor seam.Descriptor
	Events     []agent.Event
	Inbox      []seam.QueuedMessage
	Active     bool
}

func stateOf(t *testing.T, s *Store, id string) (childState, error) {
	t.Helper()
	var c childState
	var err error
	if c.Header, err = s.Header(ctx, id); err != nil {
		return c, err
	}
	if c.Descriptor, err = s.Descriptor(ctx, id); err != nil {
		return c, err
	}
	if c.Events, err = s.Events(ctx, id); err != nil {
		return c, err
	}
	if c.Inbox, err = s.Queued(ctx, id); err != nil {
		return c, err
	}
	act, err := s.Residents(ctx)
	for _, a := range act {
		c.Active = c.Active || a.ChildID == id
	}
	return c, err
}

// Page-level corruption: random bytes over a random page (any page past
// the two meta pages), for many seeds. The process never panics; opening
// either fails with an error naming the file and the repair command, or
// the store opens and a listing never fails; and Repair copies every child
// whose pages are intact exactly as it was, keeping the original beside it.
func TestPageCorruptionIsReportedAndRepaired(t *testing.T) {
	pristine := t.TempDir()
	ids := corruptionFixture(t, pristine, 40)
	pm := readPageMap(t, filepath.Join(pristine, FileName))
	orig, err := os.ReadFile(filepath.Join(pristine, FileName))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]childState{}
	{
		s := openTest(t, pristine)
		for _, id := range ids {
			c, err := stateOf(t, s, id)
			if err != nil {
				t.Fatal(err)
			}
			want[id] = c
		}
		s.Close()
	}
	npages := len(orig) / pm.pageSize
	seeds := 60
	if testing.Short() {
		seeds = 15
	}
	var openFailed, recoveredWhole, touched, panicked int
	// The last case is not random: a page only one child's journal uses,
	// filled with 0xff, which bbolt cannot read without panicking; so the
	// store boundary is exercised whatever the random cases hit.
	own := ownPage(pm, ids[5])
	for seed := 0; seed <= seeds; seed++ {
		rng := rand.New(rand.NewPCG(uint64(seed), 99))
		pg := uint64(2 + rng.IntN(npages-2))
		data := append([]byte(nil), orig...)
		off := rng.IntN(pm.pageSize - 8)
		n := 8 + rng.IntN(pm.pageSize-off-8+1)
		if seed == seeds {
			pg, off, n = own, 0, pm.pageSize
		}
		for i := 0; i < n; i++ {
			if seed == seeds {
				data[int(pg)*pm.pageSize+i] = 0xff
				continue
			}
			data[int(pg)*pm.pageSize+off+i] = byte(rng.Uint32())
		}
		dir := t.TempDir()
		path := filepath.Join(dir, FileName)
		if err := os.WriteFile(path, data, 0o600); err != nil {
			t.Fatal(err)
		}
		what := fmt.Sprintf("seed %d (page %d of %d, bytes %d..%d)", seed, pg, npages, off, off+n)

		s, err := Open(dir, Options{LockTimeout: time.Second})
		if err != nil {
			openFailed++
			if !errors.Is(err, ErrDamaged) || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "mcp-subagent doctor") {
				t.Errorf("%s: Open = %v; want a damaged-store error naming the file and the repair command", what, err)
			}
		} else {
			m := manager.New(manager.Options{Store: s})
			for _, parent := range []string{"principal:local", ids[2], ids[6]} {
				if _, err := managertest.ListChildren(m, seam.ParentRef{Principal: "local", AgentID: strings.TrimPrefix(parent, "principal:local")}); err != nil {
					t.Errorf("%s: listing the children of %s failed: %v", what, parent, err)
				}
			}
			for _, id := range ids {
				if _, err := stateOf(t, s, id); errors.Is(err, ErrDamaged) { // reads never panic
					panicked++
				}
			}
			_ = m.Close(context.Background())
			if err := s.Close(); err != nil {
				t.Errorf("%s: Close: %v", what, err)
			}
		}

		before, err := os.ReadFile(path) // as the server left it
		if err != nil {
			t.Fatal(err)
		}
		rep, err := Repair(dir, Options{LockTimeout: time.Second})
		if err != nil {
			t.Errorf("%s: Repair: %v", what, err)
			continue
		}
		if kept, err := os.ReadFile(rep.Backup); err != nil || string(kept) != string(before) {
			t.Errorf("%s: the original was not kept as %s: %v", what, rep.Backup, err)
		}
		fresh, err := Open(dir, Options{LockTimeout: time.Second})
		if err != nil {
			t.Errorf("%s: the repaired store does not open: %v", what, err)
			continue
		}
		for _, id := range ids {
			if pm.pages[id][pg] {
				touched++
				continue // its data was on the damaged page
			}
			got, err := stateOf(t, fresh, id)
			if err != nil || !reflect.DeepEqual(got, want[id]) {
				t.Errorf("%s: child %s, whose pages are intact, was not copied as it was (%v; active %v, want %v; %d events, want %d); lost: %q",
					what, id, err, got.Active, want[id].Active, len(got.Events), len(want[id].Events), rep.Lost)
				continue
			}
			recoveredWhole++
		}
		fresh.Close()
	}
	t.Logf("%d seeds over %d pages: %d opens refused, %d reads of a damaged page recovered from a bbolt panic, %d intact children copied whole, %d child-pages hit",
		seeds, npages, openFailed, panicked, recoveredWhole, touched)
	if panicked == 0 {
		t.Error("no read hit a bbolt panic: the corruption does not exercise the store boundary")
	}
}

package manager_test

import (
	"context"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mcp-subagent/mcp-subagent/agent"
	"github.com/mcp-subagent/mcp-subagent/internal/seed"
	"github.com/mcp-subagent/mcp-subagent/manager"
	"github.com/mcp-subagent/mcp-subagent/persist/memstore"
	"github.com/mcp-subagent/mcp-subagent/seam"
)

// readCounter counts the children a store hands out through its listing
// reads (Listings and Descendants entries) and the journals it reads.
type readCounter struct {
	seam.Store
	listed   atomic.Int64
	journals atomic.Int64
}

func (c *readCounter) Listings(ctx context.Context, p string, page seam.Page) ([]seam.Listing, error) {
	ls, err := c.Store.Listings(ctx, p, page)
	c.listed.Add(int64(len(ls)))
	return ls, err
}

func (c *readCounter) Descendants(ctx context.Context, root string, page seam.Page) ([]seam.Listing, error) {
	ls, err := c.Store.Descendants(ctx, root, page)
	c.listed.Add(int64(len(ls)))
	return ls, err
}

func (c *readCounter) Events(ctx context.Context, id string) ([]agent.Event, error) {
	c.journals.Add(1)
	return c.Store.Events(ctx, id)
}

// A descendants page reads only its own rows from the store (one more,
// to know there is a next page, and the subtrees of rows that have
// children, for their tree usage), not the whole subtree; and the pages
// together are the whole tree, in creation order (ties by id), row for row
// what the unpaged listing gives.
func TestDescendantsPageReadsOnlyItsRows(t *testing.T) {
	st := &readCounter{Store: memstore.New()}
	root := seam.ParentRef{Principal: "big", Cwd: "/work"}
	const n, kids, limit = 3000, 7, 50
	if err := seed.Children(st, root, n); err != nil {
		t.Fatal(err)
	}
	// A second level under one early child, created after every first-level
	// child: creation order across levels is not depth-first order.
	mid := "agent-0000000000000005"
	for i := range kids {
		id := fmt.Sprintf("grandchild-%02d", i)
		h := seam.Header{ID: id, Parent: mid, Principal: "big", Depth: 2, DepthCap: 3, Mode: seam.ModeContinuable,
			Provider: "spawn", Label: id, Cwd: "/work", CreatedAt: time.Now().UTC().Add(time.Hour + time.Duration(i))}
		d := seam.Descriptor{Version: seam.DescriptorVersion, Mode: seam.ModeContinuable, Provider: "spawn", Label: id}
		if err := st.WriteChild(context.Background(), id, seam.ChildWrite{Create: &seam.NewChild{Header: h, Descriptor: d}}); err != nil {
			t.Fatal(err)
		}
	}
	m := newManager(t, manager.Options{Store: st}, instantProvider{})

	whole, err := m.ListDescendants(root)
	if err != nil {
		t.Fatal(err)
	}
	slices.SortStableFunc(whole, func(a, b manager.Row) int {
		if c := a.CreatedAt.Compare(b.CreatedAt); c != 0 {
			return c
		}
		return strings.Compare(a.ID, b.ID)
	})
	if len(whole) != n+kids {
		t.Fatalf("the unpaged listing has %d rows, want %d", len(whole), n+kids)
	}

	var got []manager.Row
	q := manager.ListQuery{Descendants: true, Limit: limit}
	for pages := 0; ; pages++ {
		st.listed.Store(0)
		st.journals.Store(0)
		p, err := m.List(root, q)
		if err != nil {
			t.Fatal(err)
		}
		// The page's rows and one more; a row with children (mid) reads
		// its subtree for its tree usage.
		budget := int64(limit + 1)
		for _, r := range p.Rows {
			if r.ID == mid {
				budget += 2 * kids // its subtree, and the next page's lookahead
			}
		}
		if read := st.listed.Load(); read > budget {
			t.Fatalf("page %d read %d children from the store for %d rows (a page may read %d): it reads the subtree, not its rows",
				pages, read, len(p.Rows), budget)
		}
		if j := st.journals.Load(); j != 0 {
			t.Fatalf("page %d read %d journals; checkpoints are current", pages, j)
		}
		got = append(got, p.Rows...)
		if p.Next == "" {
			break
		}
		q.Cursor = p.Next
	}
	if len(got) != len(whole) {
		t.Fatalf("the pages hold %d rows, the listing %d", len(got), len(whole))
	}
	for i := range got {
		if !reflect.DeepEqual(got[i], whole[i]) {
			t.Fatalf("row %d: paged %+v, unpaged %+v", i, got[i], whole[i])
		}
	}
}

package listing

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/mcp-subagent/mcp-subagent/seam"
)

// Page sizes of a paged listing.
const (
	DefaultPageLimit = 50
	MaxPageLimit     = 500
)

// Statuses a listing can be filtered by (Row.Status).
const (
	StatusRunning = "running"
	StatusIdle    = "idle"
	StatusReady   = "ready"
	// StatusQueued is a resident child whose turn waits for a running
	// slot (Options.MaxRunningChildren, MaxRunningTotal).
	StatusQueued = "queued"
)

// Query asks for one page of a caller's listing.
type Query struct {
	Descendants bool   // the whole subtree, not only direct children
	Status      string // keep only rows with this status; "": every row
	Limit       int    // rows per page; zero: DefaultPageLimit; at most MaxPageLimit
	Cursor      string // where the page starts: a previous page's Next; "": the first page
}

// Page is one page of a listing, in creation order (ties by id).
type Page struct {
	Rows []Row
	// Next is the cursor of the following page; empty on the last page.
	Next string
}

// cursor is what a Next cursor carries: the listing it belongs to and the
// last row's place in it. It is opaque to callers (base64 of JSON).
type cursor struct {
	V    int    `json:"v"`
	Deep bool   `json:"d,omitempty"`
	Stat string `json:"s,omitempty"`
	T    int64  `json:"t"` // the last row's created-at, Unix nanoseconds
	ID   string `json:"i"`
}

func (c cursor) key() seam.ListingKey {
	return seam.ListingKey{CreatedAt: time.Unix(0, c.T).UTC(), ID: c.ID}
}

func encodeCursor(q Query, last Row) string {
	b, _ := json.Marshal(cursor{V: 1, Deep: q.Descendants, Stat: q.Status, T: last.CreatedAt.UnixNano(), ID: last.ID})
	return base64.RawURLEncoding.EncodeToString(b)
}

func decodeCursor(q Query) (seam.ListingKey, error) {
	if q.Cursor == "" {
		return seam.ListingKey{}, nil
	}
	bad := func(why string) error {
		return &seam.Error{Code: seam.CodeInvalidRequest, Message: fmt.Sprintf("cursor: %s; pass the next_cursor of the previous page unchanged, or no cursor for the first page", why)}
	}
	b, err := base64.RawURLEncoding.DecodeString(q.Cursor)
	if err != nil || len(b) > 1024 {
		return seam.ListingKey{}, bad("not a cursor this server gave")
	}
	var c cursor
	if err := json.Unmarshal(b, &c); err != nil || c.V != 1 || c.ID == "" {
		return seam.ListingKey{}, bad("not a cursor this server gave")
	}
	if c.Deep != q.Descendants || c.Stat != q.Status {
		return seam.ListingKey{}, bad(fmt.Sprintf("it belongs to a listing with scope %s and status %q", scopeName(c.Deep), c.Stat))
	}
	return c.key(), nil
}

func scopeName(deep bool) string {
	if deep {
		return "descendants"
	}
	return "children"
}

// Page returns one page of the listing of root (a caller's address): its direct children or the
// whole subtree; either way a page reads only its rows from a store index
// (Store.Listings, Store.Descendants), plus the live state. Rows
// come in creation order, ties by id; following Next visits every row
// once, and children created meanwhile join the end, since a child is
// always created after the cursor's last row. A status filter of running,
// queued or idle reads only resident children, which are in memory.
func (m Lister) Page(ctx context.Context, root string, q Query) (Page, error) {
	switch q.Status {
	case "", StatusRunning, StatusQueued, StatusIdle, StatusReady, StatusInputRequired:
	default:
		return Page{}, &seam.Error{Code: seam.CodeInvalidRequest, Message: fmt.Sprintf("status: %q is not one of running, queued, idle, ready, input_required", q.Status)}
	}
	switch {
	case q.Limit == 0:
		q.Limit = DefaultPageLimit
	case q.Limit < 0 || q.Limit > MaxPageLimit:
		return Page{}, &seam.Error{Code: seam.CodeInvalidRequest, Message: fmt.Sprintf("limit: %d is out of range; give 1 to %d", q.Limit, MaxPageLimit)}
	}
	after, err := decodeCursor(q)
	if err != nil {
		return Page{}, err
	}
	var rows []Row // up to Limit+1: one more tells there is a next page
	// A child asking a question (input_required) is resident too: its
	// question is held by its running turn.
	switch resident := q.Status == StatusRunning || q.Status == StatusQueued || q.Status == StatusIdle || q.Status == StatusInputRequired; {
	case resident && !q.Descendants:
		rows = m.residentRows(ctx, root, q, after)
	default:
		read := m.Store.Listings
		if q.Descendants {
			read = m.Store.Descendants
		}
		var whole bool
		rows, whole, err = m.seekRows(ctx, root, q, after, read)
		if err != nil {
			return Page{}, err
		}
		if whole {
			return Page{Rows: rows}, nil
		}
	}
	out := Page{Rows: rows}
	if len(rows) > q.Limit {
		out.Rows = rows[:q.Limit]
		out.Next = encodeCursor(q, out.Rows[q.Limit-1])
	}
	return out, nil
}

// seekRows reads a page's rows through a store index (a parent's children,
// or a root's whole subtree): it seeks the cursor and reads on only until
// it holds one row more than a page that passes the status filter, so a
// page costs its own rows, not the listing before it. whole is set when
// the store cannot be read on a first page: the rows are then the live
// ones and a diagnostic row, unpaged (they are few).
func (m Lister) seekRows(ctx context.Context, root string, q Query, after seam.ListingKey,
	read func(context.Context, string, seam.Page) ([]seam.Listing, error)) (rows []Row, whole bool, err error) {
	claims := m.Source.Elsewhere(ctx) // children resident at other instances
	// rows holds up to Limit+1: one more tells there is a next page.
	for page := (seam.Page{After: after, Limit: q.Limit + 1}); len(rows) <= q.Limit; {
		ls, err := read(ctx, root, page)
		if err != nil {
			if !after.IsZero() || len(rows) > 0 {
				return nil, false, &seam.Error{Code: seam.CodePersistenceUnavailable, Message: "reading the session store failed; list again", Err: err}
			}
			// As ListDescendants does.
			return m.liveRows(root, err), true, nil
		}
		for _, r := range m.childRows(ctx, ls, claims) {
			if keeps(q.Status, r) {
				rows = append(rows, r)
			}
		}
		if len(ls) < page.Limit {
			break
		}
		page.After = ls[len(ls)-1].Key()
	}
	return rows, false, nil
}

// residentRows are the caller's resident children (running, queued, idle or input_required) with
// the status asked for, after the cursor, up to one more than a page.
func (m Lister) residentRows(ctx context.Context, parent string, q Query, after seam.ListingKey) []Row {
	var ls []seam.Listing
	for _, a := range m.Source.ResidentChildren(parent) {
		ls = append(ls, seam.Listing{Header: a.Header})
	}
	claims := m.Source.Elsewhere(ctx)
	ls = append(ls, m.Source.ResidentElsewhere(ctx, parent, claims)...)
	slices.SortFunc(ls, func(x, y seam.Listing) int { return compareKeys(x.Key(), y.Key()) })
	var rows []Row
	for _, r := range m.childRows(ctx, ls, claims) {
		if len(rows) > q.Limit {
			break
		}
		if !after.Before(rowKey(r)) || !keeps(q.Status, r) {
			continue
		}
		rows = append(rows, r)
	}
	return rows
}

// keeps reports whether a row passes a status filter. Diagnostic rows pass
// an empty filter only: a child that cannot be read has no status.
func keeps(status string, r Row) bool {
	return status == "" || (r.Kind == "child" && r.Status == status)
}

func rowKey(r Row) seam.ListingKey { return seam.ListingKey{CreatedAt: r.CreatedAt, ID: r.ID} }

func compareKeys(a, b seam.ListingKey) int {
	switch {
	case a.Before(b):
		return -1
	case b.Before(a):
		return 1
	}
	return 0
}

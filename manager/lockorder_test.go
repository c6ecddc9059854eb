package manager

import (
	"go/ast"
	"go/parser"
	"go/token"
	"go/types"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
)

// TestLockOrder checks the package's source against the lock order the
// package doc writes down (doc.go, "Lock order"): it fails when a function
// takes a lock while holding one that the doc does not rank above it
// (directly, or through a call to a function of this package that takes
// it), when a lock nests in itself, when a lock is held across a call into
// a Store, Provider or Driver that the doc does not allow, and when a
// mutex exists that the doc does not rank.
//
// It reads go/ast and go/types over this package's files (about 0.1 s).
// In each function it follows which locks are held statement by statement
// (a branch that returns drops out, a deferred Unlock holds to the end, a
// loop body is balanced). It does not see calls through function values
// (listeners, Options.Callback, cancel funcs, a journal's subscribers),
// locks of other packages (agent.Journal's; the policies' are checked by
// TestPoliciesHoldNoLockAcrossACall), or TryLock; function literals are
// checked on their own as if nothing were held; instances are not told
// apart, so a parent-then-child nesting of one lock would be refused
// rather than allowed. A dynamic checker (a wrapper recording acquisitions
// per goroutine) would see those, but only on the paths tests run, and
// would wrap every lock; this one reads every path and costs nothing at
// run time.
func TestLockOrder(t *testing.T) {
	order, outcall, accessors := docLockOrder(t)
	a := analyseLocks(t, ".", "manager", false)
	rank := map[string]int{}
	for i, l := range order {
		rank[l] = i
	}
	for _, l := range a.mutexes {
		if _, ok := rank[l]; !ok {
			t.Errorf("the mutex %s is not in doc.go's lock order: rank it", l)
		}
	}
	for _, l := range order {
		if !contains(a.mutexes, l) {
			t.Errorf("doc.go's lock order names %s, which is not a mutex of this package", l)
		}
	}
	for _, e := range a.edges {
		if rank[e.held] >= rank[e.taken] {
			t.Errorf("%s: %s is taken while %s is held (%s), against doc.go's lock order %v", e.pos, e.taken, e.held, e.via, order)
		}
	}
	for _, c := range a.outcalls {
		if !outcall[c.held] && !accessors[c.callee] {
			t.Errorf("%s: %s is held across a call to %s%s; doc.go allows that only under %v", c.pos, c.held, c.callee, through(c.via), keys(outcall))
		}
	}
	if testing.Verbose() {
		for _, e := range a.edges {
			t.Logf("nest %s -> %s at %s (%s)", e.held, e.taken, e.pos, e.via)
		}
		for _, c := range a.outcalls {
			t.Logf("outcall under %s: %s at %s", c.held, c.callee, c.pos)
		}
	}
}

// docLockOrder reads the ranked list and the out-call rule from doc.go's
// "Lock order" section: lines "//  N. Type.field — ..." in order, and the
// locks named in "Only ... may be held across a call into", and the
// interface methods named after "may be called under any lock:".
func docLockOrder(t *testing.T) (order []string, outcall, accessors map[string]bool) {
	t.Helper()
	src, err := os.ReadFile("doc.go")
	if err != nil {
		t.Fatal(err)
	}
	text := string(src)
	i := strings.Index(text, "// # Lock order")
	if i < 0 {
		t.Fatal(`doc.go has no "# Lock order" section`)
	}
	sec := text[i:]
	if j := strings.Index(sec[1:], "// # "); j >= 0 {
		sec = sec[:j+1]
	}
	item := regexp.MustCompile(`(?m)^//\s+\d+\.\s+(\w+\.\w+)`)
	for _, m := range item.FindAllStringSubmatch(sec, -1) {
		order = append(order, m[1])
	}
	if len(order) == 0 {
		t.Fatal("doc.go's lock order lists no locks")
	}
	outcall = map[string]bool{}
	rule := regexp.MustCompile(`(?s)Only ((?:\w+\.\w+(?:,| and| or|\s)*)+) may be held across a call into`)
	if m := rule.FindStringSubmatch(sec); m != nil {
		for _, l := range regexp.MustCompile(`\w+\.\w+`).FindAllString(m[1], -1) {
			outcall[l] = true
		}
	}
	accessors = map[string]bool{}
	if k := strings.Index(sec, "may be called under\n// any lock:"); k >= 0 {
		list := sec[k:]
		if e := strings.Index(list, "\n//\n"); e >= 0 {
			list = list[:e]
		}
		for _, a := range regexp.MustCompile(`\b[A-Z]\w*\.[A-Z]\w*\b`).FindAllString(list, -1) {
			accessors[a] = true
		}
	}
	if len(accessors) == 0 {
		t.Fatal("doc.go's lock order names no accessors that may be called under any lock")
	}
	return order, outcall, accessors
}

type lockEdge struct {
	held, taken string
	pos         token.Position
	via         string // "Lock" or the call that takes it
}

type outCall struct {
	held, callee string
	pos          token.Position
	via          string // the function of this package that makes the call, if not the site
}

type lockAnalysis struct {
	mutexes  []string
	edges    []lockEdge
	outcalls []outCall
}

// lockAnalyser walks each function body in source order, tracking the
// classes of locks held (a class is Type.field, or func.var for a local
// mutex: instances of one class are not told apart).
type lockAnalyser struct {
	pkg        string
	funcValues bool
	fset       *token.FileSet
	info       *types.Info
	classes    map[string]bool // Type.field of every mutex field
	locals     map[types.Object]string
	takes      map[*types.Func]map[string]bool // locks a function takes, directly or through its calls
	outs       map[*types.Func]map[string]bool // Store, Provider and Driver methods it calls, likewise
	calls      map[*types.Func][]*types.Func
	sites      []site // calls and locks made while holding something
}

type site struct {
	held   []string
	lock   string      // a lock taken here, or
	callee *types.Func // a call to a function of this package, or
	out    string      // a call into a Store, Provider or Driver
	pos    token.Pos
}

// analyseLocks analyses the package pkg in dir. With funcValues, a call
// through a function value whose signature is known (a callback of the
// package's own declaring) counts as a call out, as an interface method of
// the package does.
func analyseLocks(t *testing.T, dir, pkg string, funcValues bool) lockAnalysis {
	t.Helper()
	fset := token.NewFileSet()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var files []*ast.File
	for _, e := range entries {
		n := e.Name()
		if !strings.HasSuffix(n, ".go") || strings.HasSuffix(n, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, filepath.Join(dir, n), nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, f)
	}
	// Imports are empty packages: only this package's own types matter
	// (whose field a lock is, which function a call reaches), and checking
	// the dependencies from source would cost seconds. The errors this
	// leaves are ignored.
	conf := types.Config{Importer: emptyImporter{}, Error: func(error) {}}
	info := &types.Info{Types: map[ast.Expr]types.TypeAndValue{}, Defs: map[*ast.Ident]types.Object{},
		Uses: map[*ast.Ident]types.Object{}, Selections: map[*ast.SelectorExpr]*types.Selection{}}
	conf.Check(pkg, fset, files, info)

	la := &lockAnalyser{pkg: pkg, funcValues: funcValues, fset: fset, info: info, classes: map[string]bool{}, locals: map[types.Object]string{},
		takes: map[*types.Func]map[string]bool{}, outs: map[*types.Func]map[string]bool{}, calls: map[*types.Func][]*types.Func{}}
	for _, f := range files {
		for _, d := range f.Decls {
			gd, ok := d.(*ast.GenDecl)
			if !ok {
				continue
			}
			for _, s := range gd.Specs {
				ts, ok := s.(*ast.TypeSpec)
				if !ok {
					continue
				}
				st, ok := ts.Type.(*ast.StructType)
				if !ok {
					continue
				}
				for _, fl := range st.Fields.List {
					if isMutexType(fl.Type) {
						for _, n := range fl.Names {
							la.classes[ts.Name.Name+"."+n.Name] = true
						}
					}
				}
			}
		}
	}
	for _, f := range files {
		for _, d := range f.Decls {
			fd, ok := d.(*ast.FuncDecl)
			if !ok || fd.Body == nil {
				continue
			}
			fn, _ := info.Defs[fd.Name].(*types.Func)
			la.function(fn, fd.Name.Name, fd.Body)
		}
	}
	// What a function takes and calls out to includes its callees', to a
	// fixpoint.
	for changed := true; changed; {
		changed = false
		for fn, callees := range la.calls {
			for _, c := range callees {
				for _, sum := range []map[*types.Func]map[string]bool{la.takes, la.outs} {
					for l := range sum[c] {
						if !sum[fn][l] {
							if sum[fn] == nil {
								sum[fn] = map[string]bool{}
							}
							sum[fn][l] = true
							changed = true
						}
					}
				}
			}
		}
	}
	var out lockAnalysis
	for c := range la.classes {
		out.mutexes = append(out.mutexes, c)
	}
	sort.Strings(out.mutexes)
	for _, s := range la.sites {
		pos := fset.Position(s.pos)
		for _, h := range s.held {
			switch {
			case s.lock != "":
				out.edges = append(out.edges, lockEdge{held: h, taken: s.lock, pos: pos, via: "Lock"})
			case s.callee != nil:
				for l := range la.takes[s.callee] {
					out.edges = append(out.edges, lockEdge{held: h, taken: l, pos: pos, via: "call " + s.callee.Name()})
				}
				for o := range la.outs[s.callee] {
					out.outcalls = append(out.outcalls, outCall{held: h, callee: o, pos: pos, via: s.callee.Name()})
				}
			case s.out != "":
				out.outcalls = append(out.outcalls, outCall{held: h, callee: s.out, pos: pos})
			}
		}
	}
	return out
}

type emptyImporter struct{}

func (emptyImporter) Import(p string) (*types.Package, error) {
	pkg := types.NewPackage(p, path.Base(p))
	pkg.MarkComplete()
	return pkg, nil
}

func isMutexType(e ast.Expr) bool {
	sel, ok := e.(*ast.SelectorExpr)
	if !ok {
		return false
	}
	x, ok := sel.X.(*ast.Ident)
	return ok && x.Name == "sync" && (sel.Sel.Name == "Mutex" || sel.Sel.Name == "RWMutex")
}

// function analyses one body; fn is nil for a function literal, which is
// analysed on its own with nothing held (it runs later, or in a goroutine,
// or under whatever its caller holds: see doc.go's caveats).
func (la *lockAnalyser) function(fn *types.Func, name string, body *ast.BlockStmt) {
	w := &walker{la: la, fn: fn, name: name}
	w.block(body.List, map[string]bool{})
}

type walker struct {
	la   *lockAnalyser
	fn   *types.Func
	name string
}

// block walks stmts with held and returns what is held after them, and
// whether they always leave (return, branch, panic).
func (w *walker) block(stmts []ast.Stmt, held map[string]bool) (map[string]bool, bool) {
	for _, s := range stmts {
		var term bool
		held, term = w.stmt(s, held)
		if term {
			return held, true
		}
	}
	return held, false
}

func copyHeld(h map[string]bool) map[string]bool {
	c := make(map[string]bool, len(h))
	for k := range h {
		c[k] = true
	}
	return c
}

func union(hs ...map[string]bool) map[string]bool {
	u := map[string]bool{}
	for _, h := range hs {
		for k := range h {
			u[k] = true
		}
	}
	return u
}

func (w *walker) stmt(s ast.Stmt, held map[string]bool) (map[string]bool, bool) {
	switch s := s.(type) {
	case *ast.BlockStmt:
		return w.block(s.List, held)
	case *ast.LabeledStmt:
		return w.stmt(s.Stmt, held)
	case *ast.ReturnStmt:
		for _, e := range s.Results {
			held = w.expr(e, held)
		}
		return held, true
	case *ast.BranchStmt:
		return held, true
	case *ast.IfStmt:
		if s.Init != nil {
			held, _ = w.stmt(s.Init, held)
		}
		held = w.expr(s.Cond, held)
		then, tterm := w.block(s.Body.List, copyHeld(held))
		els, eterm := copyHeld(held), false
		if s.Else != nil {
			els, eterm = w.stmt(s.Else, els)
		}
		switch {
		case tterm && eterm:
			return held, true
		case tterm:
			return els, false
		case eterm:
			return then, false
		}
		return union(then, els), false
	case *ast.ForStmt:
		if s.Init != nil {
			held, _ = w.stmt(s.Init, held)
		}
		if s.Cond != nil {
			held = w.expr(s.Cond, held)
		}
		w.block(s.Body.List, copyHeld(held))
		return held, false
	case *ast.RangeStmt:
		held = w.expr(s.X, held)
		w.block(s.Body.List, copyHeld(held))
		return held, false
	case *ast.SwitchStmt, *ast.TypeSwitchStmt, *ast.SelectStmt:
		var clauses []ast.Stmt
		switch s := s.(type) {
		case *ast.SwitchStmt:
			if s.Init != nil {
				held, _ = w.stmt(s.Init, held)
			}
			if s.Tag != nil {
				held = w.expr(s.Tag, held)
			}
			clauses = s.Body.List
		case *ast.TypeSwitchStmt:
			if s.Init != nil {
				held, _ = w.stmt(s.Init, held)
			}
			held, _ = w.stmt(s.Assign, held)
			clauses = s.Body.List
		case *ast.SelectStmt:
			clauses = s.Body.List
		}
		var outs []map[string]bool
		hasDefault := false
		for _, c := range clauses {
			h := copyHeld(held)
			var body []ast.Stmt
			switch c := c.(type) {
			case *ast.CaseClause:
				hasDefault = hasDefault || c.List == nil
				for _, e := range c.List {
					h = w.expr(e, h)
				}
				body = c.Body
			case *ast.CommClause:
				hasDefault = hasDefault || c.Comm == nil
				if c.Comm != nil {
					h, _ = w.stmt(c.Comm, h)
				}
				body = c.Body
			}
			if out, term := w.block(body, h); !term {
				outs = append(outs, out)
			}
		}
		if _, sel := s.(*ast.SelectStmt); sel {
			hasDefault = true // a select without default blocks until a case runs
		}
		if !hasDefault {
			outs = append(outs, held)
		}
		if len(outs) == 0 {
			return held, true
		}
		return union(outs...), false
	case *ast.DeferStmt:
		// A deferred Unlock keeps the lock to the end; other deferred calls
		// run at the end with what is then held (not followed).
		w.funcLits(s.Call)
		return held, false
	case *ast.GoStmt:
		// The goroutine holds nothing of ours.
		for _, a := range s.Call.Args {
			held = w.expr(a, held)
		}
		w.funcLits(s.Call.Fun)
		return held, false
	case *ast.ExprStmt:
		held = w.expr(s.X, held)
		if c, ok := s.X.(*ast.CallExpr); ok {
			if id, ok := c.Fun.(*ast.Ident); ok && id.Name == "panic" {
				return held, true
			}
		}
		return held, false
	case *ast.AssignStmt:
		for _, e := range s.Rhs {
			held = w.expr(e, held)
		}
		return held, false
	case *ast.DeclStmt:
		if gd, ok := s.Decl.(*ast.GenDecl); ok {
			for _, sp := range gd.Specs {
				vs, ok := sp.(*ast.ValueSpec)
				if !ok {
					continue
				}
				if isMutexType(vs.Type) {
					for _, n := range vs.Names {
						c := w.name + "." + n.Name
						w.la.locals[w.la.info.Defs[n]] = c
						w.la.classes[c] = true
					}
				}
				for _, e := range vs.Values {
					held = w.expr(e, held)
				}
			}
		}
		return held, false
	case *ast.SendStmt:
		held = w.expr(s.Chan, held)
		return w.expr(s.Value, held), false
	case *ast.IncDecStmt:
		return w.expr(s.X, held), false
	}
	return held, false
}

// funcLits analyses the function literals in e on their own.
func (w *walker) funcLits(e ast.Node) {
	ast.Inspect(e, func(n ast.Node) bool {
		if fl, ok := n.(*ast.FuncLit); ok {
			w.la.function(nil, w.name, fl.Body)
			return false
		}
		return true
	})
}

// expr records the calls and locks in e, innermost (argument) first.
func (w *walker) expr(e ast.Expr, held map[string]bool) map[string]bool {
	if e == nil {
		return held
	}
	var visit func(n ast.Node) bool
	visit = func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.FuncLit:
			w.la.function(nil, w.name, n.Body)
			return false
		case *ast.CallExpr:
			for _, a := range n.Args {
				ast.Inspect(a, visit)
			}
			if sel, ok := n.Fun.(*ast.SelectorExpr); ok {
				ast.Inspect(sel.X, visit)
			}
			held = w.call(n, held)
			return false
		}
		return true
	}
	ast.Inspect(e, visit)
	return held
}

func (w *walker) heldList(held map[string]bool) []string {
	var l []string
	for k := range held {
		l = append(l, k)
	}
	sort.Strings(l)
	return l
}

func (w *walker) call(c *ast.CallExpr, held map[string]bool) map[string]bool {
	la := w.la
	sel, _ := c.Fun.(*ast.SelectorExpr)
	if sel != nil {
		switch sel.Sel.Name {
		case "Lock", "RLock", "Unlock", "RUnlock":
			if class := la.lockClass(sel.X); class != "" {
				if strings.HasSuffix(sel.Sel.Name, "Unlock") {
					held = copyHeld(held)
					delete(held, class)
					return held
				}
				w.note(la.takes, class)
				if len(held) > 0 {
					la.sites = append(la.sites, site{held: w.heldList(held), lock: class, pos: c.Pos()})
				}
				held = copyHeld(held)
				held[class] = true
				return held
			}
		}
		if s := la.info.Selections[sel]; s != nil && s.Kind() == types.MethodVal && types.IsInterface(s.Recv()) {
			if n, ok := types.Unalias(derefType(s.Recv())).(*types.Named); ok && n.Obj().Pkg() != nil && n.Obj().Pkg().Path() == la.pkg {
				out := n.Obj().Name() + "." + sel.Sel.Name
				w.note(la.outs, out)
				if len(held) > 0 {
					la.sites = append(la.sites, site{held: w.heldList(held), out: out, pos: c.Pos()})
				}
				return held
			}
		}
	}
	var callee *types.Func
	switch f := c.Fun.(type) {
	case *ast.Ident:
		callee, _ = la.info.Uses[f].(*types.Func)
	case *ast.SelectorExpr:
		callee, _ = la.info.Uses[f.Sel].(*types.Func)
	}
	if callee == nil && la.funcValues {
		if _, isSig := la.info.TypeOf(c.Fun).(*types.Signature); isSig {
			if _, lit := c.Fun.(*ast.FuncLit); !lit && la.info.Types[c.Fun].IsValue() {
				out := "func value " + types.ExprString(c.Fun)
				w.note(la.outs, out)
				if len(held) > 0 {
					la.sites = append(la.sites, site{held: w.heldList(held), out: out, pos: c.Pos()})
				}
				return held
			}
		}
	}
	if callee == nil || callee.Pkg() == nil || callee.Pkg().Path() != la.pkg {
		return held
	}
	if w.fn != nil {
		la.calls[w.fn] = append(la.calls[w.fn], callee)
	}
	if len(held) > 0 {
		la.sites = append(la.sites, site{held: w.heldList(held), callee: callee, pos: c.Pos()})
	}
	return held
}

// note adds what to the walked function's summary in sum (a function
// literal has none).
func (w *walker) note(sum map[*types.Func]map[string]bool, what string) {
	if w.fn == nil {
		return
	}
	if sum[w.fn] == nil {
		sum[w.fn] = map[string]bool{}
	}
	sum[w.fn][what] = true
}

func derefType(t types.Type) types.Type {
	if p, ok := t.(*types.Pointer); ok {
		return p.Elem()
	}
	return t
}

// lockClass names the mutex x denotes: Type.field, or func.var for a
// local; "" when x is not one of this package's mutexes.
func (la *lockAnalyser) lockClass(x ast.Expr) string {
	switch x := x.(type) {
	case *ast.Ident:
		return la.locals[la.info.Uses[x]]
	case *ast.SelectorExpr:
		tv, ok := la.info.Types[x.X]
		if !ok {
			return ""
		}
		n, ok := types.Unalias(derefType(tv.Type)).(*types.Named)
		if !ok {
			return ""
		}
		if c := n.Obj().Name() + "." + x.Sel.Name; la.classes[c] {
			return c
		}
	}
	return ""
}

func through(via string) string {
	if via == "" {
		return ""
	}
	return " (through " + via + ")"
}

func contains(l []string, s string) bool {
	for _, x := range l {
		if x == s {
			return true
		}
	}
	return false
}

func keys(m map[string]bool) []string {
	var l []string
	for k := range m {
		l = append(l, k)
	}
	sort.Strings(l)
	return l
}

// TestPoliciesHoldNoLockAcrossACall checks what doc.go's lock order says
// of the policy packages and of the child's writer (persister): their
// mutexes are the ones it names, and each is a leaf — no lock nests in it, and no call out of the package (a method
// of an interface the package declares, such as its Host or Store, or a
// callback it was handed) is made while it is held. So a call into a
// policy may be made under any lock of the manager.
func TestPoliciesHoldNoLockAcrossACall(t *testing.T) {
	src, err := os.ReadFile("doc.go")
	if err != nil {
		t.Fatal(err)
	}
	named := map[string]bool{}
	for _, m := range regexp.MustCompile(`\b(admission|authority|budget|interrupts|listing|persister|questions|recovery|retention|sessions|validate|wording|worktrees)\.(\w+\.\w+)`).FindAllStringSubmatch(string(src), -1) {
		named[m[1]+"."+m[2]] = true
	}
	found := map[string]bool{}
	for _, pkg := range []string{"admission", "authority", "budget", "interrupts", "listing", "pacing", "persister", "questions", "recovery", "remote", "retention", "sessions", "validate", "wording", "worktrees"} {
		a := analyseLocks(t, pkg, pkg, true)
		for _, l := range a.mutexes {
			found[pkg+"."+l] = true
		}
		for _, e := range a.edges {
			t.Errorf("%s: %s is taken while %s is held (%s): a policy's lock is a leaf", e.pos, e.taken, e.held, e.via)
		}
		for _, c := range a.outcalls {
			t.Errorf("%s: %s is held across a call to %s%s: a policy calls out with no lock held", c.pos, c.held, c.callee, through(c.via))
		}
		if testing.Verbose() {
			t.Logf("%s: mutexes %v", pkg, a.mutexes)
		}
	}
	for l := range found {
		if !named[l] {
			t.Errorf("the policy mutex %s is not named in doc.go's lock order: name it", l)
		}
	}
	for l := range named {
		if !found[l] && strings.Count(l, ".") == 2 && strings.HasSuffix(l, "mu") {
			t.Errorf("doc.go's lock order names %s, which is not a mutex of that policy", l)
		}
	}
}

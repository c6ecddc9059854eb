package schemas

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/url"
	"reflect"
	"regexp"
	"slices"
	"strings"

	"github.com/google/jsonschema-go/jsonschema"
	"github.com/mcp-subagent/mcp-subagent/internal/truncate"
)

// Limits of output schemas and of the values checked against them; the
// package doc says why each exists.
const (
	// MaxOutputDepth is the deepest nesting of objects and arrays a value
	// checked against an output schema may have.
	MaxOutputDepth = 128
	// MaxSchemaChain is the longest chain of subschemas ($ref, allOf,
	// anyOf, oneOf, not, if/then/else, dependentSchemas) an output schema
	// may apply to one value before it descends into a property or item.
	MaxSchemaChain = 64
	// MaxSchemaFan bounds how many subschemas, counted with repeats,
	// one subschema applies to one value in place: anyOf over two $refs
	// to anyOf over two $refs... doubles with every level.
	MaxSchemaFan = 10_000
	// MaxOutputChecks bounds the work of checking one value: the number
	// of (subschema, value) applications, each weighted by the size of the
	// value where the validator may print it.
	MaxOutputChecks = 4_000_000
)

// Output is a checked output schema: an object-rooted JSON Schema that
// resolved, whose keywords are well-formed, and whose subschemas cannot
// apply to one value in a loop. Its Validate is bounded in depth and work.
type Output struct {
	rs    *jsonschema.Resolved
	nodes []*node
}

// node is one subschema and the subschemas the validator applies from it.
type node struct {
	s    *jsonschema.Schema
	id   int
	path string // JSON Pointer from the root; "" is the root
	base *node  // the innermost enclosing schema with an $id, or the root
	uri  *url.URL
	// anchors of a base: name → node, and whether it is a $dynamicAnchor.
	anchors map[string]anchor
	kids    []*node // every direct subschema, applied or not

	// inPlace are applied to the same value: a cycle here never ends.
	inPlace []*node
	// The rest are applied to parts of the value.
	props         map[string]*node
	patterns      []patternNode
	additional    *node
	propertyNames *node
	unevalProps   *node
	prefix        []*node // prefixItems, or draft-07 items as an array
	items         *node
	addItems      *node
	contains      *node
	unevalItems   *node

	prints bool // type, enum or const: a failure prints the whole value
	chain  int  // longest in-place chain from here, in nodes
	fan    int  // subschemas applied in place from here, with repeats
}

type anchor struct {
	n       *node
	dynamic bool
}

type patternNode struct {
	re *regexp.Regexp
	n  *node
}

// CompileOutput checks raw as an output schema and compiles it. Errors say
// where in the schema the problem is (a JSON Pointer, "root" for the top)
// and quote at most a few hundred bytes of it.
func CompileOutput(raw []byte) (*Output, error) {
	var s jsonschema.Schema
	if err := json.Unmarshal(raw, &s); err != nil {
		return nil, fmt.Errorf("output schema is not a JSON Schema object: %s", truncate.Head(err.Error(), 300))
	}
	if s.Type != "object" {
		return nil, fmt.Errorf(`output schema must have "type": "object" at its root`)
	}
	if !supportedDraft(s.Schema) {
		return nil, fmt.Errorf(`"$schema" %s is not supported; use %q or %q, or leave it out`,
			clipQuote(s.Schema), draft202012, draft07)
	}
	rs, err := s.Resolve(nil)
	if err != nil {
		return nil, fmt.Errorf("output schema does not resolve: %s", truncate.Head(err.Error(), 300))
	}
	o := &Output{rs: rs}
	root := o.walk(&s, "")
	for _, n := range o.nodes {
		if err := checkKeywords(n); err != nil {
			return nil, err
		}
	}
	if err := o.link(root, s.Schema == draft07 || s.Schema == draft07s); err != nil {
		return nil, err
	}
	if err := o.checkChains(); err != nil {
		return nil, err
	}
	return o, nil
}

const (
	draft202012 = "https://json-schema.org/draft/2020-12/schema"
	draft07     = "http://json-schema.org/draft-07/schema#"
	draft07s    = "https://json-schema.org/draft-07/schema#"
)

// supportedDraft mirrors jsonschema-go, which refuses every Validate of a
// schema with another $schema: such a child could never deliver.
func supportedDraft(v string) bool {
	return v == "" || v == draft202012 || v == draft07 || v == draft07s
}

var pointerEscaper = strings.NewReplacer("~", "~0", "/", "~1")

// walk makes a node of every subschema of s, in the tree jsonschema-go
// walks, with its JSON Pointer path.
func (o *Output) walk(s *jsonschema.Schema, path string) *node {
	n := &node{s: s, id: len(o.nodes), path: path}
	o.nodes = append(o.nodes, n)
	sub := func(c *jsonschema.Schema, p string) *node {
		k := o.walk(c, p)
		n.kids = append(n.kids, k)
		return k
	}
	one := func(c *jsonschema.Schema, seg string) *node {
		if c == nil {
			return nil
		}
		return sub(c, path+"/"+seg)
	}
	list := func(cs []*jsonschema.Schema, seg string) []*node {
		var out []*node
		for i, c := range cs {
			out = append(out, sub(c, fmt.Sprintf("%s/%s/%d", path, seg, i)))
		}
		return out
	}
	// each walks a map in sorted order, so paths and errors are stable.
	each := func(m map[string]*jsonschema.Schema, seg string, f func(string, *node)) {
		for _, k := range slices.Sorted(maps.Keys(m)) {
			c := sub(m[k], path+"/"+seg+"/"+pointerEscaper.Replace(k))
			if f != nil {
				f(k, c)
			}
		}
	}
	inPlace := func(cs ...*node) {
		for _, c := range cs {
			if c != nil {
				n.inPlace = append(n.inPlace, c)
			}
		}
	}
	// Never applied by themselves: reached only through a $ref.
	each(s.Defs, "$defs", nil)
	each(s.Definitions, "definitions", nil)
	one(s.ContentSchema, "contentSchema")

	inPlace(list(s.AllOf, "allOf")...)
	inPlace(list(s.AnyOf, "anyOf")...)
	inPlace(list(s.OneOf, "oneOf")...)
	inPlace(one(s.Not, "not"), one(s.If, "if"), one(s.Then, "then"), one(s.Else, "else"))
	each(s.DependentSchemas, "dependentSchemas", func(_ string, c *node) { inPlace(c) })
	each(s.DependencySchemas, "dependencies", func(_ string, c *node) { inPlace(c) })

	each(s.Properties, "properties", func(k string, c *node) {
		if n.props == nil {
			n.props = map[string]*node{}
		}
		n.props[k] = c
	})
	each(s.PatternProperties, "patternProperties", func(k string, c *node) {
		// Resolve compiled every pattern already.
		n.patterns = append(n.patterns, patternNode{regexp.MustCompile(k), c})
	})
	n.additional = one(s.AdditionalProperties, "additionalProperties")
	n.propertyNames = one(s.PropertyNames, "propertyNames")
	n.unevalProps = one(s.UnevaluatedProperties, "unevaluatedProperties")
	n.prefix = append(list(s.PrefixItems, "prefixItems"), list(s.ItemsArray, "items")...)
	n.items = one(s.Items, "items")
	n.addItems = one(s.AdditionalItems, "additionalItems")
	n.contains = one(s.Contains, "contains")
	n.unevalItems = one(s.UnevaluatedItems, "unevaluatedItems")
	n.prints = s.Type != "" || s.Types != nil || s.Enum != nil || s.Const != nil
	return n
}

// where names a node's place in an error message.
func (n *node) where() string {
	if n.path == "" {
		return "at the root"
	}
	return "at " + truncate.Head(n.path, 200)
}

var jsonTypes = []string{"array", "boolean", "integer", "null", "number", "object", "string"}

// checkKeywords refuses what jsonschema-go accepts but cannot mean
// anything: an unknown type, a negative length, a zero multipleOf. The
// validator would silently reject every value, and the child could never
// deliver.
func checkKeywords(n *node) error {
	s := n.s
	known := func(t string) error {
		if !slices.Contains(jsonTypes, t) {
			return fmt.Errorf(`"type" %s is %s; use one of %s`, n.where(), clipQuote(t), strings.Join(jsonTypes, ", "))
		}
		return nil
	}
	if s.Type != "" {
		if err := known(s.Type); err != nil {
			return err
		}
	}
	if s.Types != nil {
		if len(s.Types) == 0 {
			return fmt.Errorf(`"type" %s is an empty list; name at least one type`, n.where())
		}
		seen := map[string]bool{}
		for _, t := range s.Types {
			if err := known(t); err != nil {
				return err
			}
			if seen[t] {
				return fmt.Errorf(`"type" %s lists %q twice`, n.where(), t)
			}
			seen[t] = true
		}
	}
	seen := map[string]bool{}
	for _, r := range s.Required {
		if seen[r] {
			return fmt.Errorf(`"required" %s lists %s twice`, n.where(), clipQuote(r))
		}
		seen[r] = true
	}
	for _, c := range []struct {
		name string
		v    *int
	}{{"minLength", s.MinLength}, {"maxLength", s.MaxLength}, {"minItems", s.MinItems}, {"maxItems", s.MaxItems},
		{"minProperties", s.MinProperties}, {"maxProperties", s.MaxProperties},
		{"minContains", s.MinContains}, {"maxContains", s.MaxContains}} {
		if c.v != nil && *c.v < 0 {
			return fmt.Errorf("%q %s is %d; it must be a non-negative integer", c.name, n.where(), *c.v)
		}
	}
	if s.MultipleOf != nil && !(*s.MultipleOf > 0) {
		return fmt.Errorf(`"multipleOf" %s is %g; it must be greater than 0`, n.where(), *s.MultipleOf)
	}
	return nil
}

// link resolves every $ref and $dynamicRef the way jsonschema-go does
// (Resolve already succeeded, so every reference has a target) and adds
// it as an in-place edge.
func (o *Output) link(root *node, draft7 bool) error {
	byPath := make(map[string]*node, len(o.nodes))
	for _, n := range o.nodes {
		byPath[n.path] = n
	}
	uris := map[string]*node{"": root}
	root.uri = &url.URL{}
	setAnchor := func(base *node, name string, n *node, dynamic bool) {
		if name == "" {
			return
		}
		if base.anchors == nil {
			base.anchors = map[string]anchor{}
		}
		base.anchors[name] = anchor{n, dynamic}
	}
	var dynamic map[string][]*node // $dynamicAnchor name → every node with it
	// Bases and anchors, as jsonschema-go's resolveURIs sets them.
	var bases func(n, base *node) error
	bases = func(n, base *node) error {
		s := n.s
		if s.ID != "" && !(draft7 && s.Ref != "") {
			id, err := url.Parse(s.ID)
			if err != nil {
				return fmt.Errorf("$id %s: %v", n.where(), err)
			}
			if draft7 && id.Fragment != "" {
				setAnchor(base, strings.TrimPrefix(s.ID, "#"), n, false)
			} else {
				n.uri = base.uri.ResolveReference(id)
				uris[n.uri.String()] = n
				base = n
			}
		}
		n.base = base
		if !draft7 {
			setAnchor(base, s.Anchor, n, false)
			setAnchor(base, s.DynamicAnchor, n, true)
		}
		if s.DynamicAnchor != "" {
			if dynamic == nil {
				dynamic = map[string][]*node{}
			}
			dynamic[s.DynamicAnchor] = append(dynamic[s.DynamicAnchor], n)
		}
		for _, c := range n.kids {
			if err := bases(c, base); err != nil {
				return err
			}
		}
		return nil
	}
	if err := bases(root, root); err != nil {
		return err
	}
	target := func(n *node, ref string) (*node, string, error) {
		u, err := url.Parse(ref)
		if err != nil {
			return nil, "", err
		}
		u = n.base.uri.ResolveReference(u)
		doc := *u
		doc.Fragment = ""
		t := uris[doc.String()]
		if t == nil {
			return nil, "", errors.New("it points outside the schema")
		}
		frag := u.Fragment
		if frag != "" && !strings.HasPrefix(frag, "/") {
			a, ok := t.anchors[frag]
			if !ok {
				return nil, "", fmt.Errorf("no anchor %q", frag)
			}
			if a.dynamic {
				return a.n, frag, nil
			}
			return a.n, "", nil
		}
		p := t.path
		if frag != "" {
			for _, seg := range strings.Split(frag[1:], "/") {
				seg = strings.NewReplacer("~1", "/", "~0", "~").Replace(seg)
				p += "/" + pointerEscaper.Replace(seg)
			}
		}
		if d := byPath[p]; d != nil {
			return d, "", nil
		}
		return nil, "", errors.New("it does not point at a subschema")
	}
	for _, n := range o.nodes {
		if n.s.Ref != "" {
			t, _, err := target(n, n.s.Ref)
			if err != nil {
				// Resolve accepted it, so we read it differently: refuse
				// rather than leave a loop unchecked.
				return fmt.Errorf("$ref %s %s cannot be followed: %v", clipQuote(n.s.Ref), n.where(), err)
			}
			n.inPlace = append(n.inPlace, t)
		}
		if n.s.DynamicRef != "" {
			t, frag, err := target(n, n.s.DynamicRef)
			if err != nil {
				return fmt.Errorf("$dynamicRef %s %s cannot be followed: %v", clipQuote(n.s.DynamicRef), n.where(), err)
			}
			n.inPlace = append(n.inPlace, t)
			// A dynamic reference may land on any schema with that
			// $dynamicAnchor: count every one.
			if frag != "" {
				n.inPlace = append(n.inPlace, dynamic[frag]...)
			}
		}
	}
	return nil
}

// checkChains refuses an in-place loop (a schema that applies itself to
// the same value without descending into it: the validator would recurse
// until the stack overflows and kill the process) and in-place chains
// longer than MaxSchemaChain or fanning out wider than MaxSchemaFan.
func (o *Output) checkChains() error {
	const (
		white = iota
		grey
		black
	)
	color := make([]int, len(o.nodes))
	for _, start := range o.nodes {
		if color[start.id] != white {
			continue
		}
		// Iterative DFS: a long $ref chain must not recurse in our stack.
		stack := []frame{{start, 0}}
		color[start.id] = grey
		for len(stack) > 0 {
			top := &stack[len(stack)-1]
			if top.next < len(top.n.inPlace) {
				c := top.n.inPlace[top.next]
				top.next++
				switch color[c.id] {
				case grey:
					return cycleError(stack, c)
				case white:
					color[c.id] = grey
					stack = append(stack, frame{c, 0})
				}
				continue
			}
			n := top.n
			n.chain, n.fan = 1, 1
			for _, c := range n.inPlace {
				n.chain = max(n.chain, c.chain+1)
				n.fan = min(n.fan+c.fan, MaxSchemaFan+1) // saturate: no overflow
			}
			if n.chain > MaxSchemaChain {
				return fmt.Errorf("a chain of more than %d subschemas ($ref, allOf, anyOf, oneOf, not, if/then/else) applied to one value starts %s; flatten it", MaxSchemaChain, n.where())
			}
			if n.fan > MaxSchemaFan {
				return fmt.Errorf("the subschema %s applies more than %d subschemas to one value (its $ref, allOf, anyOf and oneOf branches repeat each other); simplify it", n.where(), MaxSchemaFan)
			}
			color[n.id] = black
			stack = stack[:len(stack)-1]
		}
	}
	return nil
}

// frame is one step of checkChains' depth-first search.
type frame struct {
	n    *node
	next int // the next in-place edge to follow
}

// cycleError words the loop that closes at back, from the search stack.
func cycleError(stack []frame, back *node) error {
	var loop []string
	in := false
	for _, f := range stack {
		if f.n == back {
			in = true
		}
		if in {
			loop = append(loop, pathName(f.n))
		}
	}
	loop = append(loop, pathName(back))
	if len(loop) > 6 {
		loop = append(append(loop[:3:3], "…"), loop[len(loop)-2:]...)
	}
	return fmt.Errorf("the subschema %s applies itself to the same value forever (%s); a schema may refer back to itself only below properties, items or another keyword that descends into the value",
		back.where(), strings.Join(loop, " → "))
}

func pathName(n *node) string {
	if n.path == "" {
		return "#"
	}
	return "#" + truncate.Head(n.path, 80)
}

func clipQuote(s string) string { return fmt.Sprintf("%q", truncate.Head(s, 100)) }

// value is a JSON value as the work bound sees it: its shape and size.
type value struct {
	keys []string // an object's keys, in the order of kids
	kids []*value // an object's members or an array's items
	obj  bool
	arr  bool
	size int // values in this subtree, itself included
}

// scalar stands for every string, number, boolean and null.
var scalar = &value{size: 1}

// errTooDeep is returned for a value nested deeper than MaxOutputDepth.
var errTooDeep = fmt.Errorf("the value nests objects and arrays deeper than %d levels; deliver a flatter object", MaxOutputDepth)

// shape reads v, as encoding/json decodes into an any, refusing it once it
// nests deeper than MaxOutputDepth (so a hostile depth costs nothing); depth
// counts the objects and arrays around v.
func shape(v any, depth int) (*value, error) {
	switch x := v.(type) {
	case map[string]any:
		if depth >= MaxOutputDepth {
			return nil, errTooDeep
		}
		out := &value{obj: true, size: 1}
		for _, k := range slices.Sorted(maps.Keys(x)) {
			c, err := shape(x[k], depth+1)
			if err != nil {
				return nil, err
			}
			out.keys = append(out.keys, k)
			out.kids = append(out.kids, c)
			out.size += c.size
		}
		return out, nil
	case []any:
		if depth >= MaxOutputDepth {
			return nil, errTooDeep
		}
		out := &value{arr: true, size: 1}
		for _, e := range x {
			c, err := shape(e, depth+1)
			if err != nil {
				return nil, err
			}
			out.kids = append(out.kids, c)
			out.size += c.size
		}
		return out, nil
	case nil, string, float64, bool, json.Number:
		return scalar, nil
	}
	switch reflect.ValueOf(v).Kind() {
	case reflect.Bool, reflect.String, reflect.Float32, reflect.Float64,
		reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return scalar, nil
	}
	// Structs and typed maps would need their own shape; jsonschema-go
	// validates decoded values best anyway.
	return nil, fmt.Errorf("a %T is not a decoded JSON value", v)
}

// work counts what validating v against n costs, the way jsonschema-go
// recurses, over-counting where it may stop early. It returns false once
// budget runs out, so counting itself is bounded by the budget.
func work(n *node, v *value, budget *int) bool {
	c := 1
	if n.prints {
		c = v.size // a failed type, enum or const prints the whole value
	}
	if *budget -= c; *budget < 0 {
		return false
	}
	for _, m := range n.inPlace {
		if !work(m, v, budget) {
			return false
		}
	}
	switch {
	case v.obj:
		for i, k := range v.keys {
			kid := v.kids[i]
			matched := false
			if p := n.props[k]; p != nil {
				matched = true
				if !work(p, kid, budget) {
					return false
				}
			}
			for _, p := range n.patterns {
				if *budget--; *budget < 0 {
					return false
				}
				if p.re.MatchString(k) {
					matched = true
					if !work(p.n, kid, budget) {
						return false
					}
				}
			}
			for _, m := range []*node{n.unevalProps, n.propertyNames, n.additional} {
				if m == nil || (m == n.additional && matched) {
					continue
				}
				arg := kid
				if m == n.propertyNames {
					arg = scalar
				}
				if !work(m, arg, budget) {
					return false
				}
			}
		}
	case v.arr:
		for i, kid := range v.kids {
			if i < len(n.prefix) && !work(n.prefix[i], kid, budget) {
				return false
			}
			for _, m := range []*node{n.items, n.addItems, n.contains, n.unevalItems} {
				if m != nil && !work(m, kid, budget) {
					return false
				}
			}
		}
	}
	return true
}

// Validate checks v, a value as encoding/json decodes into an any, against
// the schema. A value nested deeper than MaxOutputDepth, or one that would
// take more than MaxOutputChecks to check, is refused unchecked. The error
// names the field and quotes at most a few hundred bytes.
func (o *Output) Validate(v any) error {
	sh, err := shape(v, 0)
	if err != nil {
		return err
	}
	budget := MaxOutputChecks
	if !work(o.nodes[0], sh, &budget) {
		return fmt.Errorf("the value is too large for its output schema to check (more than %d checks); deliver a smaller object", MaxOutputChecks)
	}
	if err := o.rs.Validate(v); err != nil {
		return errors.New(truncate.Head(explain(err.Error()), 400))
	}
	return nil
}

// ValidateJSON decodes raw and validates it; it returns the decoded value.
// Nesting is measured on the bytes first, so a value nested a million deep
// is refused without being decoded.
func (o *Output) ValidateJSON(raw []byte) (any, error) {
	if nesting(raw) > MaxOutputDepth {
		return nil, errTooDeep
	}
	var v any
	if err := json.Unmarshal(raw, &v); err != nil {
		return nil, fmt.Errorf("not valid JSON: %s", truncate.Head(err.Error(), 200))
	}
	if err := o.Validate(v); err != nil {
		return nil, err
	}
	return v, nil
}

// nesting returns how deep raw nests objects and arrays, reading strings
// correctly; it stops counting past MaxOutputDepth.
func nesting(raw []byte) int {
	depth, deepest := 0, 0
	inString, escaped := false, false
	for _, b := range raw {
		switch {
		case inString:
			switch {
			case escaped:
				escaped = false
			case b == '\\':
				escaped = true
			case b == '"':
				inString = false
			}
		case b == '"':
			inString = true
		case b == '{' || b == '[':
			depth++
			if depth > deepest {
				if deepest = depth; deepest > MaxOutputDepth {
					return deepest
				}
			}
		case b == '}' || b == ']':
			depth--
		}
	}
	return deepest
}

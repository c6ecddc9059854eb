// Package schemas embeds the JSON Schemas the server validates against (the
// tools' inputs and the configuration file) and checks the output schemas
// that callers give their children. It also holds TasksWire, our own
// transcription of the Tasks extension's 2026-07-28 wire shapes, which
// the server never loads: the protocol tests check the tasks layer's
// answers against it.
//
// # Output schemas
//
// An output_schema comes from any principal, or from a child's own model,
// and jsonschema-go trusts it: it resolves a schema that applies itself to
// the same value forever ({"type":"object","$ref":"#"}, a $defs entry that
// refers to itself, two that refer to each other) and then recurses until
// the stack overflows, which Go cannot recover from: the whole process
// dies, for every principal, and again on every follow-up to the stored
// child. It also takes keywords that mean nothing ("type": "nonsense"),
// after which no value ever validates and the child can never deliver.
//
// CompileOutput is therefore the only way to an output validator, and it
// runs when a child is requested, before anything starts, and again when a
// stored child is rebuilt. It refuses, naming the place in the schema:
//   - a schema that does not resolve, or whose root is not "type": "object";
//   - keywords jsonschema-go does not check: unknown or repeated types,
//     repeated required names, negative lengths and counts, a multipleOf
//     that is not positive, an unsupported $schema;
//   - in-place loops: a cycle among the subschemas applied to the same
//     value ($ref, $dynamicRef, allOf, anyOf, oneOf, not, if, then, else,
//     dependentSchemas, dependencies). A schema may refer back to itself
//     below properties, items and the other keywords that descend into the
//     value, so recursive trees and lists are fine. References are resolved
//     as jsonschema-go resolves them; a $dynamicRef counts as reaching every
//     schema with its anchor. Unused $defs are checked too;
//   - in-place chains longer than MaxSchemaChain, and subschemas that apply
//     more than MaxSchemaFan subschemas to one value (anyOf over two $refs
//     to anyOf over two $refs... doubles at every level).
//
// Validation is bounded as well, in case a loop slipped past the check
// (defence in depth) and because a loop-free schema can still be costly: a
// value nested deeper than MaxOutputDepth is refused (on the bytes, before
// decoding, for ValidateJSON), and so is one whose check would take more
// than MaxOutputChecks (subschema, value) applications, counted before
// jsonschema-go runs. The two bounds together cap the validator's stack at
// about MaxOutputDepth × MaxSchemaChain frames. Such a value gets an error
// like a mismatch, which the child's model can answer with a smaller one.
//
// Caveats: the check is conservative. It counts every branch the validator
// might take (both sides of an if, every anyOf branch), so a schema that
// would never actually loop on any value, because an earlier keyword always
// fails first, is still refused. Unknown keywords are kept and ignored, as
// JSON Schema asks.
package schemas

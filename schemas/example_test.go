package schemas_test

import (
	"fmt"

	"github.com/mcp-subagent/mcp-subagent/schemas"
)

// A bad argument is refused with a message that names the field and says
// what is wrong, worded for a model to correct itself.
func ExampleValidator_Decode() {
	v, err := schemas.Compile("arguments for subagent", schemas.SubagentInput)
	if err != nil {
		panic(err)
	}
	var in struct {
		Description string `json:"description"`
		Prompt      string `json:"prompt"`
		MaxDepth    *int   `json:"max_depth"`
	}
	fmt.Println(v.Decode([]byte(`{"description":"fix the build","prompt":"make test pass","max_depth":-1}`), &in))
	fmt.Println(v.Decode([]byte(`{"description":"fix the build"}`), &in))
	fmt.Println(v.Decode([]byte(`{"description":"fix the build","prompt":"go"}`), &in), in.Prompt)
	// Output:
	// invalid arguments for subagent: field "max_depth" must be at least 0
	// invalid arguments for subagent: missing required field "prompt"
	// <nil> go
}

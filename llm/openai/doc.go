// Package openai is the llm.Client for OpenAI-compatible chat completions APIs,
// over github.com/openai/openai-go/v3. What both backends guarantee is in
// the llm package doc; llm/transport holds what they share.
//
//   - The SDK carries the request (URL, headers, auth) and splits the event
//     stream; the body and the chunks are this package's own small structs
//     under encoding/json, tested to be the SDK's bytes as JSON
//     (TestBodyIsTheSDKs, FuzzChunkIsTheSDKs): its reflective encoders cost
//     a third of a delegation's CPU. A chunk field of the wrong type is
//     read as zero, the rest of the chunk still counts.
//   - stream_options.include_usage is on; refusals and tool calls (merged by
//     index; a call missing its id gets "call_<i>") are assembled.
//   - The finish reason is normalised: a refusal wins over anything the wire
//     said; tool calls with a "stop" or empty/unknown wire reason report
//     [FinishToolCalls] (some servers, Ollama among them, say "stop" after
//     calling tools, and dropping the calls would leave the transcript with
//     unanswered calls). A stream with no finish_reason and no [DONE] is
//     broken.
//   - Request.MaxTokens goes out as max_completion_tokens to api.openai.com
//     (whose reasoning models reject max_tokens) and as max_tokens elsewhere
//     (which most compatible servers understand).
//   - Request.Effort goes out as reasoning_effort, the same three words.
//     Servers and models without reasoning may reject it.
package openai

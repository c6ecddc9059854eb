// Package llm is the chat model contract of mcp-subagent and its one adapter,
// to OpenAI-compatible chat completions APIs (OpenAI, DeepSeek, Ollama, vLLM,
// LM Studio, OpenRouter).
//
// The contract is [Client]: one call takes a [Request] (messages, tools) and
// returns the model's whole answer as a [Response] (one assistant message, a
// [FinishReason], token [Usage]), streaming assistant text to a callback as it
// arrives. [NewOpenAI] builds the adapter over github.com/openai/openai-go/v3.
// The package is a leaf: it imports nothing of ours, and nothing of the SDK
// leaks through its API.
//
// # What the adapter guarantees
//
//   - It always streams (stream: true, stream_options.include_usage: true) and
//     assembles content, refusal, tool calls (merged by index; a call missing
//     its id gets "call_<i>") and usage itself.
//   - The finish reason is normalised: a refusal wins over anything the wire
//     said; tool calls with a "stop" or empty/unknown wire reason report
//     [FinishToolCalls] (some servers, Ollama among them, say "stop" after
//     calling tools, and dropping the calls would leave the transcript with
//     unanswered calls).
//   - A stream that breaks (read error, error event, no answer at all, or no
//     finish_reason and no [DONE]) is a transport failure, never half an
//     answer reported as complete.
//   - HTTP 429, 5xx and transport failures are retried, Config.MaxRetries
//     times, with exponential backoff (honouring Retry-After up to a minute);
//     other statuses fail at once. The SDK's own retries are off.
//   - Errors other than cancellation are [*Error], whose message names the
//     status and the server's message and never carries the API key or URL.
//     Cancellation returns an error wrapping ctx.Err().
//   - Only the [Config] is used: the SDK's environment defaults
//     (OPENAI_BASE_URL, OPENAI_ORG_ID, ...) are not read; the caller decides.
//   - Request.MaxTokens goes out as max_completion_tokens to api.openai.com
//     (whose reasoning models reject max_tokens) and as max_tokens elsewhere
//     (which most compatible servers understand).
//   - Request.Effort goes out as reasoning_effort (low, medium, high);
//     empty sends none, leaving the server's default.
//
// # Caveats
//
// onDelta receives the text of every attempt: after a retry, the new
// attempt's text starts over. Treat deltas as progress; the Response is the
// answer. Only the first choice (index 0) is read.
package llm

// Package llm is the chat model contract of mcp-subagent: the message
// vocabulary every model client speaks. Its two backends live beside it,
// as adk-go puts model/gemini beside model: llm/openai for
// OpenAI-compatible chat completions APIs (OpenAI, DeepSeek, Ollama, vLLM,
// LM Studio, OpenRouter) and llm/anthropic for the native Anthropic
// Messages API, both over llm/transport (their shared Config, *Error,
// retries and stream bounds). Keeping the clients out of this package is
// what lets the manager, the agent loop and the stores use the vocabulary
// without linking either vendor SDK.
//
// The contract is [Client]: one call takes a [Request] (messages, tools,
// max tokens, effort) and returns the model's whole answer as a [Response]
// (one assistant message, a [FinishReason], token [Usage]), streaming
// assistant text to a callback as it arrives. openai.New builds the first
// backend over github.com/openai/openai-go/v3, anthropic.New the second
// over github.com/anthropics/anthropic-sdk-go/v2; both take the same
// transport.Config. [Priced] wraps either to cost its usage. The package is
// a leaf: it imports nothing of ours and no SDK.
//
// # What both backends guarantee (llm/openai, llm/anthropic)
//
//   - They always stream, and assemble content, tool calls and usage
//     themselves.
//   - A stream that breaks (read error, error event, no answer at all, or an
//     answer that never reached its end) is a transport failure, never half
//     an answer reported as complete.
//   - A stream that sends no event for Config.StreamIdleTimeout (default
//     5 minutes; from the request to the first event, or between two) is
//     cut, and counts as a broken stream. An Anthropic answer is whole at
//     message_stop: a body held open after it is given a second to end.
//   - An answer is bounded as it is assembled: past Config.MaxOutputBytes
//     (default 1 MiB; text, refusal and tool calls together, cut at a
//     character) the rest is not read, and the Response ends
//     [FinishLength] with OutputLimit set; its output tokens are at least
//     a token per 4 bytes read, as a cut stream reports no final count.
//   - HTTP 429, 5xx (Anthropic's 529 "overloaded" among them), transport
//     failures and broken streams are retried, Config.MaxRetries times, with
//     exponential backoff and jitter (honouring Retry-After up to a minute);
//     other statuses fail at once. The SDKs' own retries are off.
//   - Errors other than cancellation are [*Error], whose message names the
//     status and the server's message and never carries the API key or URL.
//     Cancellation returns an error wrapping ctx.Err().
//   - Without Config.HTTPClient, calls go through [DefaultTransport]:
//     up to 100 idle connections per host are kept for the next calls
//     (parallel children's calls end together; Go keeps 2), and an HTTPS
//     host gets at most 64 connections dialled at once, so calls starting
//     together share an HTTP/2 connection instead of each paying a TLS
//     handshake. An HTTPS server of HTTP/1.1 only serves at most that many
//     calls at once per client. After [DONE] the rest of the body is read
//     (up to 64 KiB, for at most a second) so its connection is reused.
//   - Only the [Config] is used: the SDKs' environment defaults
//     (OPENAI_BASE_URL, OPENAI_ORG_ID, ANTHROPIC_API_KEY, ANTHROPIC_BASE_URL,
//     ANTHROPIC_CUSTOM_HEADERS, credential profiles, ...) are not read; the
//     caller decides.
//   - Request.Effort must be empty or low, medium or high (anything else
//     fails before a request is sent); empty sends nothing, so models
//     without the knob see no new field.
//
// # Caveats
//
// onDelta receives the text of every attempt: after a retry, the new
// attempt's text starts over. Treat deltas as progress; the Response is the
// answer. Only the first choice (index 0) of a chat completion is read.
package llm

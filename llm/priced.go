package llm

import "context"

// Priced is a Client whose answers carry their cost: each Response's
// Usage.CostUSD is set from Price (added to whatever the backend itself
// reported), so budgets and tree usage can count dollars for backends that
// report only tokens.
type Priced struct {
	Client Client
	Price  Price
}

var _ Client = Priced{}

// Complete calls the wrapped client and prices its usage.
func (p Priced) Complete(ctx context.Context, req Request, onDelta func(string)) (Response, error) {
	resp, err := p.Client.Complete(ctx, req, onDelta)
	if err == nil {
		resp.Usage.CostUSD += p.Price.Cost(resp.Usage)
	}
	return resp, err
}

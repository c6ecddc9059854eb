package llm

import (
	"context"
	"math"
	"testing"
)

type usageClient Usage

func (u usageClient) Complete(context.Context, Request, func(string)) (Response, error) {
	return Response{Usage: Usage(u)}, nil
}

func TestPricedAddsCost(t *testing.T) {
	c := Priced{Client: usageClient{InputTokens: 2_000_000, OutputTokens: 500_000, CostUSD: 0.25},
		Price: Price{InputPerMTok: 3, OutputPerMTok: 15}}
	resp, err := c.Complete(context.Background(), Request{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	// 2 Mtok in at $3 + 0.5 Mtok out at $15 = $13.5, plus the reported $0.25.
	if got := resp.Usage.CostUSD; math.Abs(got-13.75) > 1e-9 {
		t.Fatalf("CostUSD = %v, want 13.75", got)
	}
}

package group_test

import (
	"encoding/json"
	"fmt"

	"github.com/svc-dev/svc/group"
)

func Example() {
	def, err := group.New("support").
		Node("triage", "triage").
		Node("billing", "billing_expert").
		Node("tech", "tech_expert").
		Edge("triage", "billing", group.When(`output.category == "billing"`), group.Input(`{"ticket": output.ticket}`)).
		Edge("triage", "tech", group.When(`output.category == "tech"`)).
		Build()
	if err != nil {
		panic(err)
	}
	g, err := group.Compile(def, nil)
	if err != nil {
		panic(err)
	}
	fmt.Println("entry:", g.Entry, "terminal:", g.Terminal)

	vars := group.Vars{Output: json.RawMessage(`{"category": "billing", "ticket": 42}`)}
	for _, e := range g.Nodes["triage"].Out {
		fires, _ := e.Fires(vars)
		if !fires {
			continue
		}
		in, _ := e.BuildInput(vars)
		fmt.Printf("%s gets %s\n", e.To, in)
	}
	fmt.Print(group.Mermaid(def))
	// Output:
	// entry: [triage] terminal: [billing tech]
	// billing gets {"ticket":42}
	// flowchart TD
	//     n_triage["triage (triage)"]
	//     n_billing["billing (billing_expert)"]
	//     n_tech["tech (tech_expert)"]
	//     n_triage -->|"output.category == #quot;billing#quot;"| n_billing
	//     n_triage -->|"output.category == #quot;tech#quot;"| n_tech
}

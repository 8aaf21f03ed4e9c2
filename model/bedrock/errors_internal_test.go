package bedrock

import (
	"context"
	"errors"
	"testing"

	"github.com/aws/smithy-go"

	"github.com/svc-dev/svc/model"
)

// A ConverseStream that ends with an exception event (no HTTP status of
// its own) fails with the exception's class.
func TestStreamExceptionClasses(t *testing.T) {
	for code, want := range map[string]model.Class{
		"ThrottlingException":         model.ClassRateLimit,
		"ServiceUnavailableException": model.ClassOverloaded,
		"ModelStreamErrorException":   model.ClassServer,
		"ModelTimeoutException":       model.ClassTimeout,
		"ValidationException":         model.ClassInvalid,
	} {
		err := callError(context.Background(), "m", &smithy.GenericAPIError{Code: code, Message: "from the stream"})
		var pe *model.ProviderError
		if !errors.As(err, &pe) || pe.Class != want || pe.Message != "from the stream" {
			t.Errorf("%s: %v; want class %s", code, err, want)
		}
	}
	err := callError(context.Background(), "m", &smithy.GenericAPIError{Code: "ValidationException", Message: "Input is too long for requested model."})
	if !model.IsContextError(err) {
		t.Errorf("a too-long input in the stream: %v; want a context-length error", err)
	}
}

//go:build !linux

package sandbox

// ReexecInPrivateMountNamespace does nothing where there are no mount
// namespaces.
func ReexecInPrivateMountNamespace(string) {}

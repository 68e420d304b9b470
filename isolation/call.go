package isolation

// Call runs fn in the namespace as Do does and returns its value too. The
// value comes back through a buffered channel, never through a variable
// that fn captures: past the deadline Do returns while an abandoned fn
// still runs, and it must then write nowhere the caller reads. A call
// that did not finish returns T's zero value with Do's error.
func Call[T any](m *MountNamespace, fn func() (T, error)) (T, error) {
	out := make(chan T, 1)
	err := m.Do(func() error {
		v, err := fn()
		out <- v
		return err
	})
	select {
	case v := <-out:
		return v, err
	default:
		var zero T
		return zero, err
	}
}

"""Audits: measurements that attack or check a model rather than build it.

One module per audit (membership inference, unlearning quality, quantization recovery); each
works through the public surface of the models it audits. Import the module you need: this
package imports nothing eagerly, so an audit's heavy dependencies (torch, dp-accounting) load
only when that audit runs.
"""

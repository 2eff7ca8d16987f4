"""tf.data input pipelines: kept as TF on purpose, their graph functions left as written."""

from tern.features.tf_data.feature import FEATURE

__all__ = ["FEATURE"]

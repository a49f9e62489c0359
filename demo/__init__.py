"""`make demo`: the product's main job end to end on an embedded cluster (or, opt-in, on a cluster of yours).

Build the images, start a control plane and a real node, install the operator with Helm, publish the example
models (trained on scikit-learn's digits and on sentences the project wrote) to an S3 repository (MinIO),
`kubectl apply` Models and Ensembles, run the example client in the cluster through the Ensembles' Services,
publish a new model version while a load runs and show the atomic switch, then clean up. See `demo.flow`.
"""

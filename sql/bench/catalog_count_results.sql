-- dkm bench catalog: one query through the catalogue under test (the view resolves every table).
SELECT count(*) AS n FROM knn_results

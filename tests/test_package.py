from airflow_provider_training import get_provider_info


def test_provider_info_names_the_distribution():
    info = get_provider_info()
    assert info["package-name"] == "airflow-provider-training"
    assert info["name"]
